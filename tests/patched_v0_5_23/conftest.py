"""pytest setup for tests/patched_v0_5_23: import sglang 0.5.23 from its tree.

Run this folder in its own pytest process (see harness23.py). A missing or
wrong tree, or sglang already imported from another tree, makes each test
module here one failing test carrying the reason; nothing is skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness23  # noqa: E402

_SETUP_ERROR = None
try:
    harness23.install()
except RuntimeError as exc:  # tree missing, not 0.5.23, or another sglang loaded
    # Nothing is installed in this process then (no sys.path or import-hook
    # change), so another test folder collected alongside is not disturbed;
    # each test module becomes one failing item (pytest_pycollect_makemodule).
    _SETUP_ERROR = str(exc)
    harness23.record_setup_error(_SETUP_ERROR)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    # The tensors here are tiny: torch's intra-op threads only contend (CPU
    # time 27 s -> 16 s measured on the 2-core machine with one thread).
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _deep_gemm_not_asked_yet():
    # The SM90 row rule's DeepGEMM probe caches its answers per process
    # (patch 0002): each test starts with none, whatever ran before it.
    answers = _probe_answers()
    answers.clear()
    yield
    answers.clear()


def _probe_answers() -> dict:
    if _SETUP_ERROR is not None:
        return {}
    from cpu_sglang import import_sglang

    rule = import_sglang("sglang.kernels.ops.attention.dsa.paged_mqa_logits")
    return getattr(rule, "_SM90_NEXT_N_ROWS", {})  # absent before patch 0002


class _TreeNotSetUp(pytest.Item):
    """Stands for a test module that cannot be imported: fails with the reason."""

    def runtest(self):
        pytest.fail(_SETUP_ERROR, pytrace=False)

    def reportinfo(self):
        return self.path, 0, f"{self.path.name}: sglang 0.5.23 tree not set up"


class _ModuleNotImported(pytest.File):
    def collect(self):
        yield _TreeNotSetUp.from_parent(self, name="sglang_0_5_23_tree")


def pytest_pycollect_makemodule(module_path, parent):
    # Importing a test module here would need sglang 0.5.23; without it, each
    # module is one failing item instead of a collection error (which would
    # stop a whole pytest session that also collects other folders).
    if _SETUP_ERROR is not None:
        return _ModuleNotImported.from_parent(parent, path=module_path)
    return None


def pytest_report_header(config):
    if _SETUP_ERROR is not None:
        return f"sglang 0.5.23 tree: NOT SET UP ({_SETUP_ERROR})"
    return f"sglang 0.5.23 tree: {harness23.sglang_tree()}"
