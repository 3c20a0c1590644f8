"""The series' test in sglang's tree imports the DSA backend before the indexer.

On the H200 box, flashinfer 0.6.12 is installed without its cuda-tile dependency, so
``import flashinfer.comm`` fails (``No module named 'cuda.tile'``). Two sglang modules import
from it: ``layers/flashinfer_comm_fusion.py`` inside a try/except, and
``layers/moe/token_dispatcher/flashinfer_utils.py`` without one. Whichever runs first decides:
after the guarded failure ``flashinfer.comm.mnnvl`` (loaded by ``flashinfer/comm/__init__.py``
before the failing line) stays in ``sys.modules`` and the unguarded import finds it; the other
way round the test errors at setup, as the committed v0.5.23 run did
(docs/results/sglang_tree_test_h200_v0_5_23.xml) while bench/indexer_step.py, which imports
dsa_backend first, ran.

This runs the test's own module import and ``_Fixture.__init__`` up to its first CUDA call (where
torch starts CUDA, ``torch.cuda._lazy_init``, whichever torch build is installed), then imports the
indexer as the fixture does next, in a fresh process on the patched 0.5.23 tree, and checks the order
sglang's modules were first imported in. What it cannot see on a CPU: branches that only a CUDA build takes (flashinfer is
absent here, so neither module imports it; the order of the two modules is what is checked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness23

TEST_FILE = "test/registered/kernels/ops/attention/test_dsa_sm90_paged_mqa.py"
GUARDED = "sglang.srt.layers.flashinfer_comm_fusion"
UNGUARDED = "sglang.srt.layers.moe.token_dispatcher.flashinfer_utils"
INDEXER = "sglang.srt.layers.attention.dsa.dsa_indexer"

# Run in a child process: it records every sglang module as it is first imported, imports the
# sglang-tree test as a module and builds its _Fixture, which fails at its first CUDA call.
DRIVER = r"""
import importlib.util, json, os, sys, traceback
CUDA_INIT = os.path.join("torch", "cuda", "__init__.py")
sys.path.insert(0, sys.argv[1])
import harness23
harness23.install()
order = []
class Recorder:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("sglang.") and name not in order:
            order.append(name)
        return None
sys.meta_path.insert(0, Recorder())
spec = importlib.util.spec_from_file_location("sglang_tree_test", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    module._Fixture((2,))
    stopped = None
except Exception as exc:  # the mock runner's first CUDA tensor, on a machine without a GPU
    frames = traceback.extract_tb(exc.__traceback__)
    stopped = dict(
        error=f"{type(exc).__name__}: {exc}",
        in_cuda_init=any(f.name == "_lazy_init" and f.filename.endswith(CUDA_INIT) for f in frames),
    )
# what the fixture imports next, on a GPU: the indexer it builds
importlib.import_module("sglang.srt.layers.attention.dsa.dsa_indexer")
print(json.dumps(dict(order=order, stopped=stopped)))
"""

# sglang.test.test_utils imports sglang.benchmark.datasets, which imports Hugging Face datasets at
# module level; the CPU test set does not install it and the test never loads a dataset.
DATASETS_STANDIN = '''"""Stand-in: datasets is not installed for the CPU tests; nothing here loads a dataset."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("datasets stand-in (tests/patched_v0_5_23/test_sglang_tree_test_imports.py)")
'''


def _first_imports(tmp_path):
    harness23.require()
    test_file = harness23.sglang_tree().parent / TEST_FILE
    assert test_file.is_file(), f"{test_file}: the patch's test in sglang's tree is missing"
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text(DATASETS_STANDIN)
    here = Path(__file__).resolve().parent
    env_path = f"{tmp_path}:{here}"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(here), str(test_file)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_guarded_flashinfer_comm_import_comes_first(tmp_path):
    run = _first_imports(tmp_path)
    order = run["order"]
    # it got past the imports, to the mock runner's first CUDA tensor: where torch starts CUDA, whose error
    # depends on the build (a CPU build: "Torch not compiled with CUDA enabled"; PyPI's CUDA build on a machine
    # without a GPU: "Found no NVIDIA driver on your system"); on a GPU machine the fixture is built
    stopped = run["stopped"]
    assert stopped is None or stopped["in_cuda_init"], f"stopped before torch starts CUDA: {stopped['error']}"
    for name in (GUARDED, UNGUARDED, INDEXER):
        assert name in order, f"{name} was never imported"
    assert order.index(GUARDED) < order.index(UNGUARDED), (
        f"{UNGUARDED} (no guard) is imported before {GUARDED}: on a box without cuda-tile the "
        "sglang-tree test errors at setup"
    )
