"""The toolkit suite's fixtures: real sglang trees in temp dirs (testing/sglang_trees.py), the PR tests'
series and project folder (testing/pr_series.py), and the DeepGEMM stand-in (testing/deep_gemm_trees.py)."""

from testing.deep_gemm_trees import deep_gemm_patches, deep_gemm_source, line_pin, stand_in_pin  # noqa: F401
from testing.pr_series import line_project, pr_project  # noqa: F401  (fixtures are found by name)
from testing.sglang_trees import *  # noqa: F401,F403
