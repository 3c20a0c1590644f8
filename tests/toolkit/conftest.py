"""The toolkit suite's fixtures: real sglang trees in temp dirs (testing/sglang_trees.py), and the PR tests'
series and project folder (testing/pr_series.py)."""

from testing.pr_series import line_project, pr_project  # noqa: F401  (fixtures are found by name)
from testing.sglang_trees import *  # noqa: F401,F403
