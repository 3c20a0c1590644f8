"""Patches 1-2 on a GPU, through sglang's own indexer: top-k identical across layouts and trees.

``bench/indexer_step.py`` runs the real code path (see its docstring): the patched tree's
``DeepseekSparseAttnBackend`` builds TARGET_VERIFY metadata eagerly and through its CUDA-graph
capture and replay path (replayed with new lengths), ``Indexer._get_topk_paged`` calls DeepGEMM
``fp8_paged_mqa_logits`` in the layout the metadata names and the fused top-k transform follows,
over an fp8 index-K cache written by ``Indexer._store_index_k_cache``.  This test runs it twice,
each in its own process (one sglang tree per process):

1. the pristine v0.5.14 tree, which saves its top-k per case;
2. the patched tree: every case with the layout the backend chooses and with
   ``SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1``, eager and CUDA graph, each compared to the
   per-token eager top-k and to the pristine one (sets; differing entries allowed only where
   their logits tie at the top-k boundary, and counted).

It then asserts on the JSON the patched run wrote: every row identical, every row compared with
pristine, the multi-token layouts really reached the kernel (q with two tokens per row), per-token
where the series says so, the comparison's self-check caught a planted change, and the functions
named in ``exercised`` were observed running.

Grid: ``$SGLPATCH_INDEXER_GRID`` (``smoke`` by default, ``full`` for the committed results);
results JSON: ``$SGLPATCH_INDEXER_JSON`` (default: pytest's tmp dir).  Skips, with the reason,
without a CUDA SM90/SM100 device, DeepGEMM or sgl-kernel, or either sglang tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_trees  # noqa: E402
import indexer_runs  # noqa: E402

pytestmark = pytest.mark.gpu

gpu_trees.skip_module_without_gpu()

REQUIRED_EXERCISED = indexer_runs.EXERCISED_ON_BOTH_LINES + ("sgl_kernel.fast_topk_transform_fused",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    patched = gpu_trees.require_patched_tree()
    tmp = tmp_path_factory.mktemp("indexer")
    pristine = gpu_trees.pristine_tree(tmp / "pristine")
    if pristine is None:
        pytest.skip("no pristine sglang 0.5.14 tree: set SGLPATCH_PRISTINE_TREE or run `make apply` once")
    return indexer_runs.run_pristine_then_patched(tmp, pristine, patched, "indexer.json", "test_indexer_paged_mqa.py")


def test_pristine_run_finished(runs):
    assert runs["rc_p"] == 0, runs["log_p"][-6000:]
    assert runs["pristine"]["partial"] is False


def test_patched_run_finished(runs):
    assert runs["rc"] == 0, runs["log"][-6000:]
    assert runs["doc"]["partial"] is False


def test_graph_vs_eager_differs_only_where_the_topk_kernel_is_inexact(runs):
    """Where a CUDA-graph replay's per-token top-k differs from the eager one (same tree), the
    two logits rows are bit-identical and the eager top-k is not an exact top-k of them: the
    fused top-k kernel, on pristine v0.5.14 as on the patched tree."""
    indexer_runs.assert_graph_replays_match_eager(runs)


def test_every_row_identical_to_per_token_and_pristine(runs):
    """Top-k sets equal (ties at the boundary allowed) in every row, except rows where the
    per-token reference is itself not an exact top-k of its own logits and the other side's
    logits are bit-identical: the fused top-k kernel's doing, counted and listed in the JSON
    under ``explained`` (never more than a few rows of a case)."""
    rows = runs["doc"]["rows"]
    assert rows
    bad = [r for r in rows if not r["topk_equivalent"]]
    assert not bad, bad[:3]
    for r in rows:
        assert sorted(r["compared_with"]) == ["chosen", "per_token", "pristine"], r
        assert sum(r["mismatch_rows"].values()) == 0, r
        explained = sum(r["explained_rows"].values())
        near = sum(r.get("near_tie_rows", {}).values())
        assert r["topk_identical"] == (explained == 0 and near == 0), r
        # a few rows, not a pattern
        assert max(r["explained_rows"].values()) <= max(2, r["topk_rows"] // 100), r
        for e in r.get("explained", []):
            assert e["reference_exact_topk"] is False and e["logits_bit_identical"] is not False, e


def test_logits_bit_identical_across_layouts(runs):
    """DeepGEMM's logits in the chosen layout equal per-token's bit for bit on every position
    each token may attend to, in every case, eager and CUDA graph."""
    indexer_runs.assert_logits_bit_identical(runs)


def test_grid_covered_eager_and_graph(runs):
    indexer_runs.assert_grid_covered(runs)
    assert all(r["speedup"] for r in runs["doc"]["rows"] if r["cuda_graph"])


def test_multi_token_layouts_reached_deepgemm(runs):
    rows = runs["doc"]["rows"]
    sm90 = runs["doc"]["compute_capability"][0] == 9
    for r in rows:
        assert r["kernel_q_per_token"][1] == 1, r  # forced per-token: one token per kernel row
        tokens = r["kernel_q_chosen"][1]
        expected = {"per_token": 1, "native": r["next_n"], "paired": 2}[r["layout"]]
        assert tokens == expected, r
        if sm90:  # the series' rule, from what a capture (or an eager forward) knows
            want = gpu_trees.expected_sm90_layout(r["next_n"], r["batch_size"], r["block_table_width"])
            assert r["layout"] == want, (want, r)
    layouts = {(r["next_n"], r["layout"]) for r in rows}
    assert (2, "native") in layouts and (4, "paired") in layouts, layouts


def test_pristine_ran_per_token(runs):
    indexer_runs.assert_pristine_ran_per_token(runs)


def test_comparison_self_check_caught_a_planted_change(runs):
    indexer_runs.assert_self_check_caught_a_planted_change(runs)


def test_exercised_functions_ran(runs):
    indexer_runs.assert_exercised(runs, REQUIRED_EXERCISED)
