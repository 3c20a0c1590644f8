"""Patch 3 on a GPU: the patched EAGLE draft CUDA-graph runner, IndexShare on, seeded and not.

``seed_draft_loop_case.py`` (beside this file; its docstring lists what is sglang's and what
is ours) runs in its own process on the patched tree and writes one JSON entry per check.
This test asserts every check passed and that the ones that carry the claim are there:

- the runner captured one draft loop per batch size, whose step 0 reads the static seed
  buffer; ``can_run_graph`` took only batches whose ``spec_info.dsa_topk_indices`` is set,
  and an unseeded batch ran eagerly (upstream v0.5.23's fallback; no second graph);
- a seeded replay's draft steps used exactly the seed (two different seeds, two replays);
- the unseeded batch's eager loop computed the step-0 top-k with the real indexer (DeepGEMM +
  fused top-k transform) and step 1 reused it;
- graph outputs match the eager ``EagleDraftWorker.draft_forward``.

JSON: ``$SGLPATCH_SEED_LOOP_JSON`` (default: pytest's tmp dir).  Skips, with the reason,
without a CUDA SM90/SM100 device, DeepGEMM or sgl-kernel, or a patched tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_trees  # noqa: E402

pytestmark = pytest.mark.gpu

gpu_trees.skip_module_without_gpu()

CASE = Path(__file__).resolve().parent / "seed_draft_loop_case.py"
REQUIRED = (
    "worker_seed_enabled",
    "eager_unseeded_step0_ran_indexer",
    "indexer_topk_differs_from_seed",
    "captured_one_seeded_loop_per_batch_size",
    "graph_seed_a_steps_used_seed",
    "graph_seed_b_steps_used_seed",
    "unseeded_eager_step0_ran_indexer",
    "unseeded_eager_step1_reused_step0",
    "graph_seed_a_matches_eager",
    "unseeded_fallback_matches_eager",
    "graph_seed_b_matches_eager",
    "only_seeded_batches_replayed",
)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tree = gpu_trees.require_patched_tree()
    out = Path(os.environ.get("SGLPATCH_SEED_LOOP_JSON") or tmp_path_factory.mktemp("seed") / "seed.json")
    proc = subprocess.run(
        [sys.executable, str(CASE), "--tree", str(tree), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    assert out.is_file(), proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_case_ran_without_error(result):
    assert result["error"] is None, result["error"]


@pytest.mark.parametrize("name", REQUIRED)
def test_check(result, name):
    check = result["checks"].get(name)
    assert check is not None, f"check {name} did not run: {sorted(result['checks'])}"
    assert check["ok"], check


def test_indexer_kernels_ran(result):
    names = {e["name"] for e in result.get("exercised", [])}
    for n in (
        "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._get_topk_paged",
        "deep_gemm.fp8_paged_mqa_logits",
        "sgl_kernel.fast_topk_transform_fused",
    ):
        assert n in names, sorted(names)
