"""The v0.5.23 line's patch on a GPU, through sglang 0.5.23's own indexer: top-k identical.

``bench/indexer_step.py`` (its 0.5.23 adapter in ``bench/indexer_trees.py``) runs the real
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
logits bit-identical across row widths, the width the patch's SM90 rule gives for each case
really reached DeepGEMM (q with two tokens per row), per-token where the rule says so, the
comparison's self-check, and the functions named in ``exercised`` observed running.

Env: ``SGLPATCH_SGLANG_TREE_V0_5_23`` (patched) and ``SGLPATCH_PRISTINE_TREE_V0_5_23``
(folders holding ``sglang/``; ci/run_indexer_gpu_v0_5_23.sh sets both), the grid
``SGLPATCH_INDEXER_GRID`` (smoke by default), the JSON ``SGLPATCH_INDEXER_JSON``.  Skips, with
the reason, without an SM90/SM100 GPU, DeepGEMM or sgl-kernel, or either tree.
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

_reason = gpu_trees.gpu_skip_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)

BENCH = gpu_trees.REPO / "bench" / "indexer_step.py"
REQUIRED_EXERCISED = (
    "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._get_topk_paged",
    "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._store_index_k_cache",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_cuda_graph_state",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata_out_graph",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._apply_cuda_graph_metadata",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._paged_mqa_tokens_per_row",
    "sglang.srt.layers.attention.dsa_backend.pick_sm90_tokens_per_row",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._captured_paged_mqa_tokens_per_row",
    "sglang.srt.layers.attention.dsa.dsa_indexer.deepgemm_paged_mqa_logits_native",
    "sglang.srt.layers.attention.dsa_backend.DSAIndexerMetadata.topk_transform",
    "deep_gemm.fp8_paged_mqa_logits",
    "deep_gemm.get_paged_mqa_logits_metadata",
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


def _run(cmd, log):
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, timeout=3000)
    return proc.returncode, Path(log).read_text()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    patched, pristine = _tree("SGLPATCH_SGLANG_TREE_V0_5_23"), _tree("SGLPATCH_PRISTINE_TREE_V0_5_23")
    tmp = tmp_path_factory.mktemp("indexer23")
    grid = os.environ.get("SGLPATCH_INDEXER_GRID", "smoke")
    out = Path(os.environ.get("SGLPATCH_INDEXER_JSON") or tmp / "indexer_v0_5_23.json")
    topk_dir = tmp / "pristine_topk"
    rc_p, log_p = _run(
        [sys.executable, str(BENCH), "--tree", str(pristine), "--label", "pristine", "--grid", grid]
        + ["--dump-topk", str(topk_dir), "--json", str(out.with_name(out.stem + "_pristine.json"))],
        tmp / "pristine.log",
    )
    print(log_p[-3000:])
    command = (
        f"python bench/indexer_step.py --tree {patched} --label patched --grid {grid} "
        f"--compare-topk <pristine run's --dump-topk> --json {out.name}"
    )
    if os.environ.get("SGLPATCH_RUN_COMMAND"):
        command = f"{os.environ['SGLPATCH_RUN_COMMAND']}  (test_indexer_paged_mqa_v0_5_23.py ran: {command})"
    rc, log = _run(
        [sys.executable, str(BENCH), "--tree", str(patched), "--label", "patched", "--grid", grid]
        + ["--compare-topk", str(topk_dir), "--json", str(out), "--command", command],
        tmp / "patched.log",
    )
    print(log[-5000:])
    doc = json.loads(out.read_text())
    pristine_doc = json.loads(out.with_name(out.stem + "_pristine.json").read_text())
    return dict(rc=rc, log=log, doc=doc, pristine=pristine_doc, grid=grid, rc_p=rc_p, log_p=log_p)


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
    for doc in (runs["pristine"], runs["doc"]):
        for r in doc["rows"]:
            if r["cuda_graph"]:
                assert r["graph_vs_eager_per_token"]["mismatch_rows"] == 0, (doc["tree"], r)


def test_logits_bit_identical_across_row_widths(runs):
    bad = [r for r in runs["doc"]["rows"] if r["logits_bit_identical"] is not True]
    assert not bad, bad[:3]


def test_row_width_follows_the_sm90_rule_and_reached_deepgemm(runs):
    cap = runs["doc"]["compute_capability"]
    if cap[0] != 9:
        pytest.skip(f"the SM90 rule; this GPU is SM{cap[0]}{cap[1]}")
    for r in runs["doc"]["rows"]:
        assert r["kernel_q_per_token"][1] == 1, r
        layout = gpu_trees.expected_sm90_layout(r["next_n"], r["batch_size"], r["block_table_width"])
        assert r["layout"] == layout, (layout, r)
        assert r["kernel_q_chosen"][1] == (1 if layout == "per_token" else 2), (layout, r)
    layouts = {(r["next_n"], r["layout"]) for r in runs["doc"]["rows"]}
    assert (2, "native") in layouts and (4, "paired") in layouts, layouts


def test_pristine_ran_per_token(runs):
    rows = runs["pristine"]["rows"]
    assert rows and all(r["layout"] == "per_token" and r["kernel_q_chosen"][1] == 1 for r in rows)


def test_grid_covered_eager_and_graph(runs):
    from bench import indexer_step

    g = indexer_step.GRIDS[runs["grid"]]
    want = {
        (n, b, c, kind, graph)
        for n in g["next_ns"]
        for b in g["batch_sizes"]
        for c in g["ctxs"]
        for kind in g["lengths"]
        for graph in (False, True)
    }
    for doc in (runs["doc"], runs["pristine"]):
        got = {(r["next_n"], r["batch_size"], r["ctx"], r["lengths"], r["cuda_graph"]) for r in doc["rows"]}
        assert got == want, sorted(want - got)[:5]
    assert all(r["per_token_us"] and r["chosen_us"] for r in runs["doc"]["rows"] if r["cuda_graph"])


def test_comparison_self_check_caught_a_planted_change(runs):
    check = runs["doc"]["comparison_self_check"]
    assert check and check["detected"], check


def test_exercised_functions_ran(runs):
    names = set(runs["doc"]["exercised"])
    missing = [n for n in REQUIRED_EXERCISED if n not in names]
    assert not missing, (missing, sorted(names))
    assert names & set(TOPK_KERNELS), sorted(names)
