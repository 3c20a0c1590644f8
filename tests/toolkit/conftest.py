"""The toolkit suite's fixtures: real sglang trees in temp dirs (testing/sglang_trees.py)."""

from testing.sglang_trees import *  # noqa: F401,F403  (fixtures are found by name)
