"""The indexer-step GPU runs both lines' tests make, and the checks they share.

``run_pristine_then_patched``: ``bench/indexer_step.py`` on the pristine tree (which saves its top-k
per case), then on the patched tree (every case compared with per-token and with pristine's top-k),
each in its own process; the result is what the tests assert on:
``rc``/``log`` and ``doc`` (the patched run's JSON), ``rc_p``/``log_p`` and ``pristine`` (the
pristine run's), ``grid``.

Grid: ``$SGLPATCH_INDEXER_GRID`` (``smoke`` by default); the fixture's page layout, the same in both
runs: ``$SGLPATCH_INDEXER_PAGES`` (bench/indexer_step.py's ``--pages``; its default when unset); the
patched run's JSON: ``$SGLPATCH_INDEXER_JSON`` (default: ``json_name`` in the test's tmp dir), the
pristine run's beside it with ``_pristine`` added; ``$SGLPATCH_RUN_COMMAND`` (set by the ci/ runners)
goes into the JSON's command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gpu_trees

BENCH = gpu_trees.REPO / "bench" / "indexer_step.py"
# sglang's and the kernels' functions a patched run must be seen running, on either line
EXERCISED_ON_BOTH_LINES = (
    "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._get_topk_paged",
    "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._store_index_k_cache",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_cuda_graph_state",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata_out_graph",
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend._apply_cuda_graph_metadata",
    "sglang.srt.layers.attention.dsa_backend.DSAIndexerMetadata.topk_transform",
    "deep_gemm.fp8_paged_mqa_logits",
    "deep_gemm.get_paged_mqa_logits_metadata",
)


def fixture_options() -> list[str]:
    """bench/indexer_step.py's options for the fixture both runs build alike (their top-k are its KV slots)."""
    pages = os.environ.get("SGLPATCH_INDEXER_PAGES")
    return ["--pages", pages] if pages else []


def _bench(tree: Path, label: str, grid: str, extra: list[str], log: Path) -> tuple[int, str]:
    cmd = [sys.executable, str(BENCH), "--tree", str(tree), "--label", label, "--grid", grid]
    cmd += [*fixture_options(), *extra]
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, timeout=3000)
    return proc.returncode, log.read_text()


def run_pristine_then_patched(tmp: Path, pristine: Path, patched: Path, json_name: str, test_file: str) -> dict:
    grid = os.environ.get("SGLPATCH_INDEXER_GRID", "smoke")
    out = Path(os.environ.get("SGLPATCH_INDEXER_JSON") or tmp / json_name)
    pristine_json = out.with_name(out.stem + "_pristine.json")
    topk_dir = tmp / "pristine_topk"
    rc_p, log_p = _bench(
        pristine, "pristine", grid, ["--dump-topk", str(topk_dir), "--json", str(pristine_json)], tmp / "pristine.log"
    )
    print(log_p[-3000:])
    command = " ".join(
        ["python bench/indexer_step.py --tree", str(patched), "--label patched --grid", grid, *fixture_options()]
        + ["--compare-topk <pristine run's --dump-topk> --json", out.name]
    )
    if os.environ.get("SGLPATCH_RUN_COMMAND"):
        command = f"{os.environ['SGLPATCH_RUN_COMMAND']}  ({test_file} ran: {command})"
    compare = ["--compare-topk", str(topk_dir), "--json", str(out), "--command", command]
    rc, log = _bench(patched, "patched", grid, compare, tmp / "patched.log")
    print(log[-5000:])
    doc, pristine_doc = json.loads(out.read_text()), json.loads(pristine_json.read_text())
    return dict(rc=rc, log=log, doc=doc, pristine=pristine_doc, grid=grid, rc_p=rc_p, log_p=log_p)


def assert_graph_replays_match_eager(runs: dict) -> None:
    """Per-token top-k of a CUDA-graph replay equals the eager one (same tree), on both trees."""
    for doc in (runs["pristine"], runs["doc"]):
        for r in doc["rows"]:
            if r["cuda_graph"]:
                assert r["graph_vs_eager_per_token"]["mismatch_rows"] == 0, (doc["tree"], r)


def assert_logits_bit_identical(runs: dict) -> None:
    bad = [r for r in runs["doc"]["rows"] if r["logits_bit_identical"] is not True]
    assert not bad, bad[:3]


def assert_grid_covered(runs: dict) -> None:
    """Both runs have a row for every case of the grid, eager and CUDA graph; graph rows are timed."""
    from bench.indexer.grids import GRIDS

    g = GRIDS[runs["grid"]]
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


def assert_sm90_rows_v0_5_23(doc: dict) -> None:
    """Every row of a patched v0.5.23 run took the width the line's SM90 rule gives it, with the answers
    the run recorded from the tree's probe of [B, next_n] rows (odd next_n), and that width reached DeepGEMM."""
    probe = doc.get("sm90_next_n_rows_probe")
    assert probe, "the patched tree's probe answers are not recorded (bench/indexer/trees.py next_n_rows_probe)"
    # the backend asks about the model's index heads: the DSA test kit's config has one
    assert (probe["heads"], probe["head_dim"]) == (doc["index"]["heads"], doc["index"]["head_dim"]), probe
    for r in doc["rows"]:
        assert r["kernel_q_per_token"][1] == 1, r
        answer = probe["answers"][str(r["next_n"])]
        assert r["next_n"] % 2 == 0 or isinstance(answer, bool), (probe, r)
        layout, tokens = gpu_trees.expected_sm90_rows_v0_5_23(r["next_n"], r["batch_size"], answer)
        assert r["layout"] == layout and r["kernel_q_chosen"][1] == tokens, (layout, tokens, r)
    assert any(r["kernel_q_chosen"][1] > 1 for r in doc["rows"]), "no row ran more than one token per row"


def assert_pristine_ran_per_token(runs: dict) -> None:
    rows = runs["pristine"]["rows"]
    assert rows and all(r["layout"] == "per_token" and r["kernel_q_chosen"][1] == 1 for r in rows)


def assert_self_check_caught_a_planted_change(runs: dict) -> None:
    check = runs["doc"]["comparison_self_check"]
    assert check and check["detected"], check


def assert_exercised(runs: dict, required: tuple[str, ...]) -> None:
    names = set(runs["doc"]["exercised"])
    missing = [n for n in required if n not in names]
    assert not missing, (missing, sorted(names))
