"""bench/paged_mqa_read_once.py on CPU: its checks, with DeepGEMM replaced by the project's torch reference.

DeepGEMM does not run here (the grid itself runs on the H200).  What is checked: the float64 reference is
computed from the raw fp8 bytes and agrees with an independent dense formula; the exactness check finds the
request layout bit-identical to per-token when it is, flags it when one logit is changed, and records stock
DeepGEMM's refusal of next_n > 2; the top-k comparison counts swaps and near-ties; the report's speedups.
"""

from __future__ import annotations

import argparse
import json
import random

import pytest

torch = pytest.importorskip("torch")

from bench import paged_mqa_read_once as ro  # noqa: E402
from bench.paged_mqa import make_batch, make_kv_pool  # noqa: E402
from testing.paged_mqa_reference import ReferencePagedMQA  # noqa: E402


class StandInDeepGEMM:
    """DeepGEMM's two calls in torch; ``max_next_n`` 2 refuses wider rows as stock DeepGEMM's SM90 host check does,
    and ``poison`` changes one logit of every call with more than one token per row."""

    def __init__(self, kv_pool, max_next_n=6, poison=False):
        self.reference = ReferencePagedMQA(kv_pool)
        self.max_next_n, self.poison = max_next_n, poison

    def get_paged_mqa_logits_metadata(self, context_lens, block_kv, num_sms):
        return None

    def get_num_sms(self):
        return 4

    def fp8_paged_mqa_logits(self, q, kv, weights, ctx, table, schedule, max_len, clean_logits=False):
        if q.shape[1] > self.max_next_n:
            raise RuntimeError("Assertion error (csrc/jit_kernels/impls/sm90_fp8_mqa_logits.hpp): next_n")
        logits = self.reference(q, kv, weights, ctx, table, schedule, max_len)
        if self.poison and q.shape[1] > 1:
            logits[0, 0] += 1.0
        return logits


def args(**kw):
    base = {"fp64_max_tokens": 10**9, "topk": 16, "near_tie": 1e-5}
    return argparse.Namespace(**{**base, **kw})


def batch_of(next_n, heads, seed):
    gen = torch.Generator().manual_seed(seed)
    pool = make_kv_pool(12, "cpu", seed=seed)
    lens = [300, 70, 129]
    pages = torch.randperm(12, generator=gen)
    return pool, make_batch(lens, next_n, pages, "cpu", gen, heads)


@pytest.mark.parametrize(("next_n", "heads"), [(3, 64), (6, 32), (1, 64)])
def test_the_request_layout_is_checked_bit_for_bit_and_in_float64(next_n, heads):
    pool, batch = batch_of(next_n, heads, next_n)
    got = ro.check_case(StandInDeepGEMM(pool), pool, batch, heads, args())
    assert got["logits_bit_identical"] is True
    assert got["fp64_positions"] == int(batch.ctx_lens.sum())
    assert got["fp64_max_rel_err"] < 1e-5  # the stand-in sums in float32
    assert got["topk_rows_differ"] == got["topk_swapped"] == 0


def test_a_changed_logit_is_not_bit_identical():
    pool, batch = batch_of(3, 64, 5)
    assert ro.check_case(StandInDeepGEMM(pool, poison=True), pool, batch, 64, args())["logits_bit_identical"] is False


def test_stock_deepgemms_refusal_is_recorded_not_raised():
    pool, batch = batch_of(3, 64, 7)
    got = ro.check_case(StandInDeepGEMM(pool, max_next_n=2), pool, batch, 64, args())
    assert "next_n" in got["request_layout_error"] and "logits_bit_identical" not in got


def test_the_reference_is_the_dense_formula_from_raw_bytes():
    pool, batch = batch_of(2, 64, 11)
    ref = ro.reference_logits(pool, batch, 64)
    dense = ReferencePagedMQA(pool)(
        batch.q_fp8.view(-1, 1, 64, 128), pool, batch.weights, None, batch.block_table, None, batch.max_context_len
    )
    mask = ~torch.isnan(ref)
    assert int(mask.sum()) == int(batch.ctx_lens.sum())
    torch.testing.assert_close(dense.double()[mask], ref[mask], rtol=1e-5, atol=1e-6)


def test_topk_swaps_and_near_ties_are_counted():
    ref = torch.tensor([[5.0, 4.0, 3.0, 2.9999999, 1.0]], dtype=torch.float64)
    near = ref.clone()
    near[0, 3] = 3.1  # swaps positions 2 and 3, whose reference values lie within 1e-7 of each other
    far = ref.clone()
    far[0, 4] = 10.0  # brings in position 4, far below the k-th value
    ctx = torch.tensor([5])
    assert ro.topk_agreement(ref, ref, ctx, 3, 1e-6)["topk_swapped"] == 0
    assert ro.topk_agreement(near, ref, ctx, 3, 1e-6) == {
        "topk_rows_differ": 1,
        "topk_swapped": 1,
        "topk_swapped_near_ties": 1,
    }
    assert ro.topk_agreement(far, ref, ctx, 3, 1e-6)["topk_swapped_near_ties"] == 0


def test_the_report_takes_speedups_against_the_stock_builds_best_layout():
    key = {"heads": 64, "next_n": 4, "batch_size": 32, "ctx": 65536, "lengths": "uniform", "limit_us": 100.0}
    line = {"rows": [{**key, "per_token_us": 400.0, "paired_us": 220.0, "native_us": 160.0}]}
    stock = {"rows": [{**key, "per_token_us": 410.0, "paired_us": 200.0}]}
    (row,) = ro.join(line, stock)
    assert row["speedup_vs_per_token"] == 2.5 and row["speedup_vs_paired"] == 220 / 160
    assert row["speedup_vs_best_today"] == 200 / 160 and row["fraction_of_limit"] == 100 / 160
    assert row["kernel_reads_kv_once"] is True
    assert "| 64 | 4 | 32 | 64k |" in ro.table([row])


def test_a_third_build_is_compared_on_its_request_rows():
    key = {"heads": 64, "next_n": 4, "batch_size": 32, "ctx": 65536, "lengths": "uniform", "limit_us": 100.0}
    line = {"rows": [{**key, "per_token_us": 400.0, "native_us": 160.0, "logits_bit_identical": True}]}
    base = {"rows": [{**key, "native_us": 200.0, "logits_bit_identical": True}]}
    (row,) = ro.join(line, None, base)
    assert row["base_us"] == 200.0 and row["speedup_vs_base"] == 200 / 160
    assert row["base_logits_bit_identical"] is True
    assert "| 200.0 | 1.25x |" in ro.table([row])
    (alone,) = ro.join(line, None)
    assert "speedup_vs_base" not in alone


def test_the_report_joins_a_third_builds_run_by_its_label(tmp_path):
    key = {"heads": 64, "next_n": 3, "batch_size": 32, "ctx": 65536, "lengths": "uniform", "limit_us": 50.0}
    other = {**key, "next_n": 5}
    runs = {
        "line": [
            {**key, "per_token_us": 300.0, "native_us": 150.0},
            {**other, "per_token_us": 500.0, "native_us": 250.0},
        ],
        "stock": [{**key, "per_token_us": 310.0}, {**other, "per_token_us": 510.0}],
        "base": [{**key, "native_us": 120.0}, {**other, "request_layout_error": "refused"}],
    }
    paths = []
    for label, rows in runs.items():
        paths.append(tmp_path / f"{label}.json")
        paths[-1].write_text(json.dumps({"label": label, "device": "H200", "torch": "2.11", "reps": 1, "rows": rows}))
    ro.main(["report", *map(str, paths), "--out", str(tmp_path / "out"), "--name", "r"])
    three, five = json.loads((tmp_path / "out" / "r.json").read_text())["rows"]
    assert three["base_us"] == 120.0 and three["speedup_vs_base"] == 120 / 150
    assert "base_us" not in five  # a base row without request-layout timing is left out, not joined as zero
    assert three["speedup_vs_best_today"] == 310 / 150


def test_the_limit_is_the_larger_of_bytes_and_flops():
    # 64 requests x 64k at next_n 4: 16.4 kFLOP per token pair -> compute-bound on the H200
    us = ro.limit_us(4, 64, [65536] * 64, 65536)
    h200 = ro.DEVICE_LIMITS["NVIDIA H200"]
    flops_us = 64 * 65536 * 4 * 64 * 2 * 128 / h200["fp8_flop_per_s"] * 1e6
    assert us == pytest.approx(flops_us)
    assert ro.limit_us(1, 64, [65536] * 64, 65536) > 64 * 65536 * 132 / h200["hbm_bytes_per_s"] * 1e6


def test_each_chip_has_its_own_limit_and_report_name(tmp_path):
    case = (4, 64, [65536] * 64, 65536)
    h100 = ro.device_limits("NVIDIA H100 80GB HBM3")
    assert ro.limit_us(*case, h100) > ro.limit_us(*case, ro.device_limits("NVIDIA H200"))  # less bandwidth
    assert ro.device_limits("NVIDIA H100 PCIe") is None  # another part: no fraction rather than a wrong one
    key = {"heads": 64, "next_n": 4, "batch_size": 32, "ctx": 65536, "lengths": "uniform"}
    run_ = {"label": "line", "device": "NVIDIA H100 PCIe", "torch": "2.11", "reps": 1, "limit": None}
    path = tmp_path / "line.json"
    path.write_text(json.dumps({**run_, "rows": [{**key, "per_token_us": 400.0, "native_us": 160.0}]}))
    ro.main(["report", str(path), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "paged_mqa_read_once_nvidia_h100_pcie.json").read_text())
    assert report["limit"] is None and "fraction_of_limit" not in report["rows"][0]
    old = {**run_, "device": "NVIDIA H100 80GB HBM3"}
    del old["limit"]  # a run from before runs recorded their limits was timed against the H200's figures
    path.write_text(json.dumps({**old, "rows": []}))
    ro.main(["report", str(path), "--out", str(tmp_path)])
    assert json.loads((tmp_path / "paged_mqa_read_once_h100.json").read_text())["limit"]["hbm_bytes_per_s"] == 4.8e12


def test_cases_put_extra_cases_after_the_grid_once():
    a = argparse.Namespace(
        heads=[64],
        lengths=["uniform"],
        next_n=[3, 4],
        ctx=[4096],
        batch_sizes=[1],
        extra=["32:all:8:65536:ragged", "64:3:1:4096:uniform"],
    )
    got = ro.cases(a)
    assert got == [
        (3, 8, 65536, "ragged", 32),
        (4, 8, 65536, "ragged", 32),
        (3, 1, 4096, "uniform", 64),
        (4, 1, 4096, "uniform", 64),
    ]
    random.seed(0)


class ClusterScheduledDeepGEMM(StandInDeepGEMM):
    """Refuses a schedule sized other than one entry per cluster of ``ctas`` CTAs for rows of ``tokens``, as nv_dev's
    SM90 host check does for next_n 4 (2-CTA clusters), and one per SM for other rows."""

    def __init__(self, kv_pool, tokens, ctas):
        super().__init__(kv_pool)
        self.tokens, self.ctas = tokens, ctas

    def get_paged_mqa_logits_metadata(self, context_lens, block_kv, num_sms):
        return num_sms

    def fp8_paged_mqa_logits(self, q, kv, weights, ctx, table, schedule, max_len, clean_logits=False):
        ctas = self.ctas if q.shape[1] == self.tokens else 1
        if schedule != self.get_num_sms() // ctas:
            raise RuntimeError("Assertion error: _schedule_meta_size == num_sms / num_kv_multicast + 1")
        return super().fp8_paged_mqa_logits(q, kv, weights, ctx, table, schedule, max_len, clean_logits)


@pytest.mark.parametrize(("spec", "refused"), [("4:2", False), ("", True)])
def test_a_build_that_runs_rows_as_clusters_gets_one_schedule_entry_per_cluster(monkeypatch, spec, refused):
    monkeypatch.setenv("PAGED_MQA_KV_MULTICAST", spec)
    pool, batch = batch_of(4, 64, 11)
    got = ro.check_case(ClusterScheduledDeepGEMM(pool, tokens=4, ctas=2), pool, batch, 64, args())
    # per-token rows keep one entry per SM either way; only the request rows of 4 tokens are clusters
    if refused:
        assert "num_kv_multicast" in got["request_layout_error"]
    else:
        assert got["logits_bit_identical"] is True


def test_a_cluster_spec_may_name_its_slots_so_no_cluster_waits_for_a_second_wave(monkeypatch):
    from bench.paged_mqa import kv_multicast, schedule_for

    monkeypatch.setenv("PAGED_MQA_KV_MULTICAST", "4:2 5:3@39")
    assert kv_multicast() == {4: (2, None), 5: (3, 39)}
    pool, _ = batch_of(4, 64, 11)
    deep_gemm = ClusterScheduledDeepGEMM(pool, tokens=5, ctas=3)
    slots = {n: schedule_for(deep_gemm, torch.ones(2, n, dtype=torch.int32)) for n in (1, 4, 5)}
    assert slots == {1: deep_gemm.get_num_sms(), 4: deep_gemm.get_num_sms() // 2, 5: 39}


def test_contiguous_pages_give_each_request_one_run_and_each_rotation_its_own_pages():
    from bench.paged_mqa import make_batches

    case = (2, 3, 4 * 64, "uniform")
    plans, gen = {case: 2}, torch.Generator().manual_seed(0)
    batches = make_batches(case, plans, 24, random.Random(0), gen, "cpu", 64, "contiguous")
    tables = [b.block_table[:: case[0]] for b in batches]  # one row per request
    assert [t.tolist() for t in tables] == [
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]],
        [[12, 13, 14, 15], [16, 17, 18, 19], [20, 21, 22, 23]],
    ]
    scattered = make_batches(case, plans, 24, random.Random(0), gen, "cpu", 64)
    assert sorted(sum((b.block_table[:: case[0]].flatten().tolist() for b in scattered), [])) == list(range(24))


def test_weights_dtype_is_chosen_per_label_and_float32_unless_named():
    assert ro.weights_dtype_for("line", []) == "float32"
    assert ro.weights_dtype_for("stock", ["bfloat16"]) == "bfloat16"
    specs = ["line=bfloat16", "smoke=bfloat16"]
    assert [ro.weights_dtype_for(label, specs) for label in ("line", "smoke", "base", "stock")] == [
        "bfloat16",
        "bfloat16",
        "float32",
        "float32",
    ]
    with pytest.raises(ValueError, match="float16"):
        ro.weights_dtype_for("line", ["line=float16"])


def test_bf16_weights_reach_the_kernel_and_the_reference_alike():
    pool, batch = batch_of(4, 64, 5)
    cast = ro.with_weights_dtype(batch, "bfloat16")
    assert cast.weights.dtype == torch.bfloat16 and batch.weights.dtype == torch.float32
    got = ro.check_case(StandInDeepGEMM(pool), pool, cast, 64, args())
    assert got["logits_bit_identical"] is True
    assert got["fp64_max_rel_err"] < 1e-5  # the reference takes the same bf16 weights
