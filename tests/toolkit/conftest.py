"""The toolkit suite's fixtures: real sglang trees in temp dirs (testing/sglang_trees.py)."""

from testing.sglang_trees import (  # noqa: F401  (fixtures are found by name)
    _clean_git_env,
    base_repo,
    checkout,
    package,
    patches,
    project_pin,
    series_dir,
    sglpatch,
    wheel_path,
)
