"""The v0.5.23 line's patch on a GPU, through sglang 0.5.23's own indexer: top-k identical.

``bench/indexer_step.py`` (its 0.5.23 adapter in ``bench/indexer/trees.py``) runs the real
code path of each tree: the DSA test kit's mock runner and a real ``DeepseekSparseAttnBackend``
building TARGET_VERIFY metadata eagerly and through its CUDA-graph capture and replay path,
``Indexer._store_index_k_cache`` writing the fp8 index-K cache, ``Indexer._get_topk_paged``
calling DeepGEMM ``fp8_paged_mqa_logits`` (through 0.5.23's ``deepgemm_paged_mqa_logits_native``
/ ``_split`` helpers) and the metadata's top-k transform.  Two processes, one tree each:

1. pristine sglang 0.5.23, which saves its top-k per case (per-token on SM90);
2. the patched tree: every case with the row width the backend chooses and with
   ``SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1``, eager and CUDA graph, each compared with the
   per-token top-k and with pristine's.

Asserts on the patched run's JSON: every row equivalent (ties at the boundary allowed), DeepGEMM
logits bit-identical across row widths, the width the line's SM90 rule gives for each case
really reached DeepGEMM (q with that many tokens per row: pairs for even next_n from 16 rows on;
all of an odd next_n's tokens where the installed DeepGEMM said yes to the tree's probe, whose
answers the run records; else one), per-token where the rule says so, the comparison's
self-check, and the functions named in ``exercised`` observed running.

Env: ``SGLPATCH_SGLANG_TREE_V0_5_23`` (patched) and ``SGLPATCH_PRISTINE_TREE_V0_5_23``
(folders holding ``sglang/``; ci/run_indexer_gpu_v0_5_23.sh sets both), the grid
``SGLPATCH_INDEXER_GRID`` (smoke by default), the fixture's pages ``SGLPATCH_INDEXER_PAGES``
(random by default), the JSON ``SGLPATCH_INDEXER_JSON``.  Skips, with
the reason, without an SM90/SM100 GPU, DeepGEMM or sgl-kernel, or either tree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_trees  # noqa: E402
import indexer_runs  # noqa: E402

pytestmark = pytest.mark.gpu

gpu_trees.skip_module_without_gpu()

REQUIRED_EXERCISED = indexer_runs.EXERCISED_ON_BOTH_LINES + (
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._paged_mqa_tokens_per_row",
    "sglang.srt.layers.attention.dsa_backend.pick_sm90_paged_mqa_tokens_per_row",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._captured_paged_mqa_tokens_per_row",
    "sglang.srt.layers.attention.dsa.dsa_indexer.deepgemm_paged_mqa_logits_native",
)
# the top-k transform 0.5.23 ran: its JIT v2 kernel, or sgl-kernel's (SGLANG_OPT_USE_TOPK_V2=0)
TOPK_KERNELS = (
    "sglang.kernels.ops.attention.dsv4.topk.topk_transform_paged_v2",
    "sgl_kernel.fast_topk_transform_fused",
)


def _tree(var):
    raw = os.environ.get(var)
    if not raw or not (Path(raw) / "sglang" / "__init__.py").is_file():
        pytest.skip(f"${var} names no sglang 0.5.23 tree (ci/run_indexer_gpu_v0_5_23.sh sets it)")
    return Path(raw).resolve()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    patched, pristine = _tree("SGLPATCH_SGLANG_TREE_V0_5_23"), _tree("SGLPATCH_PRISTINE_TREE_V0_5_23")
    tmp = tmp_path_factory.mktemp("indexer23")
    test_file = "test_indexer_paged_mqa_v0_5_23.py"
    return indexer_runs.run_pristine_then_patched(tmp, pristine, patched, "indexer_v0_5_23.json", test_file)


def test_both_runs_finished(runs):
    assert runs["rc_p"] == 0, runs["log_p"][-6000:]
    assert runs["rc"] == 0, runs["log"][-6000:]
    assert runs["doc"]["partial"] is False and runs["pristine"]["partial"] is False
    assert runs["doc"]["sglang"] == runs["pristine"]["sglang"] == "0.5.23"


def test_every_row_equivalent_to_per_token_and_pristine(runs):
    rows = runs["doc"]["rows"]
    assert rows
    for r in rows:
        assert sorted(r["compared_with"]) == ["chosen", "per_token", "pristine"], r
        assert r["topk_equivalent"] and sum(r["mismatch_rows"].values()) == 0, r
        assert max(r["explained_rows"].values()) <= max(2, r["topk_rows"] // 100), r


def test_graph_vs_eager_per_token_agree(runs):
    indexer_runs.assert_graph_replays_match_eager(runs)


def test_logits_bit_identical_across_row_widths(runs):
    indexer_runs.assert_logits_bit_identical(runs)


def test_row_width_follows_the_sm90_rule_and_reached_deepgemm(runs):
    cap = runs["doc"]["compute_capability"]
    if cap[0] != 9:
        pytest.skip(f"the SM90 rule; this GPU is SM{cap[0]}{cap[1]}")
    indexer_runs.assert_sm90_rows_v0_5_23(runs["doc"])


def test_pristine_ran_per_token(runs):
    indexer_runs.assert_pristine_ran_per_token(runs)


def test_grid_covered_eager_and_graph(runs):
    indexer_runs.assert_grid_covered(runs)


def test_comparison_self_check_caught_a_planted_change(runs):
    indexer_runs.assert_self_check_caught_a_planted_change(runs)


def test_exercised_functions_ran(runs):
    indexer_runs.assert_exercised(runs, REQUIRED_EXERCISED)
    assert set(runs["doc"]["exercised"]) & set(TOPK_KERNELS), sorted(runs["doc"]["exercised"])
