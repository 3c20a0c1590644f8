"""pytest setup for tests/patched: import sglang from the selected source tree.

The harness (``cpu_sglang.py`` beside this file) is installed while this
conftest is imported, that is before any test module of this folder is
collected, so test modules may ``import sglang...`` at module level.

When the tree is missing, nothing is skipped: every test in this folder
fails with the harness's message ("run `make apply` first"), and a module
that imports sglang at collection time gets an ImportError carrying the same
message.
"""

from __future__ import annotations

import importlib.abc
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_sglang

from testing.made_once import made_once

_SETUP_ERROR = None
try:
    cpu_sglang.install()
except RuntimeError as exc:  # tree missing or shadowed
    _SETUP_ERROR = str(exc)

    class _ExplainMissingTree(importlib.abc.MetaPathFinder):
        """Turn `import sglang` into an ImportError that says what to do."""

        def find_spec(self, fullname, path=None, target=None):
            if fullname == "sglang" or fullname.startswith("sglang."):
                raise ImportError(_SETUP_ERROR)

    sys.meta_path.insert(0, _ExplainMissingTree())


@pytest.fixture(autouse=True)
def _require_sglang_tree():
    if _SETUP_ERROR is not None:
        pytest.fail(_SETUP_ERROR, pytrace=False)


def pytest_report_header(config):
    if _SETUP_ERROR is not None:
        return f"sglang tree: MISSING ({_SETUP_ERROR})"
    return f"sglang tree: {cpu_sglang.sglang_tree()}"


@pytest.fixture(scope="session")
def gpu_test_classes(tmp_path_factory) -> dict:
    """What sglang's own GPU test file (the one patches 5 and 6 add to) reports here, as
    p56_support.collect_gpu_test gives it: a child pytest that imports sglang and torch, run once per test run
    (patch 5's and patch 6's tests each read it; testing/made_once.py)."""
    import p56_support

    def build(folder: Path) -> None:
        (folder / "classes.json").write_text(json.dumps(p56_support.collect_gpu_test(folder)))

    return json.loads((made_once(tmp_path_factory, "gpu-test-classes", build) / "classes.json").read_text())
