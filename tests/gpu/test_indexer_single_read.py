"""Patch 5 on a GPU, through sglang's own indexer: next_n=3 with the single-read kernel.

Runs ``bench/indexer_step.py --grid single_read`` (next_n=3; 1-128 requests; 4k/16k/64k;
uniform and ragged lengths) on the patched tree (``$SGLPATCH_SGLANG_TREE``): every case with
the layout the patched SM90 rule chooses and with ``SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1``,
eager (host lengths) and CUDA graph (capture, then replay with new lengths).  Where the rule
chooses SINGLE_READ, ``Indexer._get_topk_paged`` calls ``fp8_paged_mqa_logits_single_read``
(Triton) instead of DeepGEMM; its top-k is compared with the forced per-token one (sets; exact
ties at the boundary, and near-ties within 1e-5 relative of the k-th logit since the kernel
sums in another order, are counted, never hidden).  Results JSON: ``$SGLPATCH_SINGLE_READ_JSON``
(default: pytest's tmp dir).  Skips, with the reason, without an SM90 device, DeepGEMM,
sgl-kernel or the patched tree.
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
SINGLE_READ_FN = "sglang.srt.layers.attention.dsa.dsa_indexer.fp8_paged_mqa_logits_single_read"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the single-read layout is SM90 only")
    patched = gpu_trees.patched_tree()
    if patched is None:
        pytest.skip("no patched sglang tree: run `make apply` or set SGLPATCH_SGLANG_TREE")
    tmp = tmp_path_factory.mktemp("single_read")
    out = Path(os.environ.get("SGLPATCH_SINGLE_READ_JSON") or tmp / "single_read.json")
    command = f"python bench/indexer_step.py --tree {patched} --label patched --grid single_read --time-eager --json {out.name}"
    if os.environ.get("SGLPATCH_RUN_COMMAND"):
        command = f"{os.environ['SGLPATCH_RUN_COMMAND']}  (test_indexer_single_read.py ran: {command})"
    cmd = [sys.executable, str(BENCH), "--tree", str(patched), "--label", "patched", "--grid", "single_read"]
    cmd += ["--time-eager"]  # the layout is chosen in eager steps only: time those too
    cmd += ["--json", str(out), "--command", command]
    with open(tmp / "run.log", "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, timeout=3000)
    log = (tmp / "run.log").read_text()
    print(log[-6000:])
    return dict(rc=proc.returncode, log=log, doc=json.loads(out.read_text()))


def test_single_read_run_finished(run):
    assert run["rc"] == 0, run["log"][-6000:]
    assert run["doc"]["partial"] is False


def test_single_read_topk_equals_per_token(run):
    rows = run["doc"]["rows"]
    assert len(rows) == 72
    for r in rows:
        assert r["topk_equivalent"], r
        assert sum(r["mismatch_rows"].values()) == 0, r
        # near-ties only where another kernel computed the logits
        if r["layout"] != "single_read":
            assert sum(r["near_tie_rows"].values()) == 0, r
        assert max(r["near_tie_rows"].values()) <= max(2, r["topk_rows"] // 100), r


def test_single_read_layout_where_the_rule_says(run):
    rows = run["doc"]["rows"]
    for r in rows:
        assert r["per_token_layout"] == "per_token" and r["kernel_q_per_token"][1] == 1, r
        assert r["layout"] in ("per_token", "single_read"), r
        # the chosen call: [B, 3] q for the single-read kernel, [3B, 1] for DeepGEMM per-token
        assert r["kernel_q_chosen"][:2] == (
            [r["batch_size"], 3] if r["layout"] == "single_read" else [3 * r["batch_size"], 1]
        ), r
        if r["cuda_graph"]:  # a capture knows no lengths: graphs keep per-token
            assert r["layout"] == "per_token", r
        elif r["batch_size"] < 8:
            assert r["layout"] == "per_token", r
    chosen = {(r["cuda_graph"], r["layout"]) for r in rows}
    assert (False, "single_read") in chosen, chosen


def test_single_read_kernel_ran(run):
    names = set(run["doc"]["exercised"])
    for name in (
        SINGLE_READ_FN,
        "sglang.srt.layers.attention.dsa_backend._sm90_single_read_layout",
        "sglang.srt.layers.attention.dsa.dsa_indexer.Indexer._get_topk_paged",
        "deep_gemm.fp8_paged_mqa_logits",
    ):
        assert name in names, (name, sorted(names))
