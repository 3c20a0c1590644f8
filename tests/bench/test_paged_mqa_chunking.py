"""bench/paged_mqa_chunking.py on CPU: 0.5.23's chunks see the same rows as one call, and the grid
picks only cases where the chunks exist.

DeepGEMM does not run here; testing.paged_mqa_reference computes each row's logits in plain torch from
the same inputs, so what is checked is the plumbing: which q, weights, lengths and block-table rows each
chunk gets, and the cat's row order.
"""

from __future__ import annotations

import argparse
import random

import pytest

torch = pytest.importorskip("torch")

from bench import paged_mqa_chunking as chunking  # noqa: E402
from bench.paged_mqa import attended_equal, make_batch, make_kv_pool  # noqa: E402
from testing.paged_mqa_reference import ReferencePagedMQA  # noqa: E402


class StandInDeepGEMM:
    """The two DeepGEMM calls the bench makes; every schedule it was asked for is kept."""

    def __init__(self, kv_pool):
        self.fp8_paged_mqa_logits = ReferencePagedMQA(kv_pool)
        self.schedules = []

    def get_paged_mqa_logits_metadata(self, context_lens, block_kv, num_sms):
        self.schedules.append(tuple(context_lens.shape))
        return None

    def get_num_sms(self):
        return 4


@pytest.mark.parametrize(("next_n", "tokens"), [(3, 1), (4, 1), (4, 2), (6, 2)])
def test_the_chunks_give_the_one_calls_logits(next_n, tokens):
    gen = torch.Generator().manual_seed(next_n)
    kv_pool = make_kv_pool(96, "cpu")
    lengths = [random.Random(next_n + j).randint(70, 300) for j in range(5)]
    batch = make_batch(lengths, next_n, torch.randperm(96, generator=gen), "cpu", gen)
    dg = StandInDeepGEMM(kv_pool)
    rows = 5 * next_n // tokens
    schedule = chunking.schedule_for(dg, chunking.rows_of(batch, tokens)[2])
    whole = chunking.one_call(dg, kv_pool, batch, tokens, schedule).view(5 * next_n, -1)
    parts = chunking.chunked(dg, kv_pool, batch, tokens, sm_count=4).view(5 * next_n, -1)
    assert attended_equal(batch, whole, parts)
    assert not attended_equal(batch, whole, parts.roll(1, 0))  # the check can fail
    # a schedule per chunk of at most 4 rows, after the one-call schedule
    chunk_rows = [shape[0] for shape in dg.schedules[1:]]
    assert chunk_rows == [min(4, rows - start) for start in range(0, rows, 4)]


def test_a_batch_with_no_more_rows_than_sms_is_one_call():
    gen = torch.Generator().manual_seed(0)
    kv_pool = make_kv_pool(32, "cpu")
    batch = make_batch([100, 180], 2, torch.randperm(32, generator=gen), "cpu", gen)
    dg = StandInDeepGEMM(kv_pool)
    chunking.chunked(dg, kv_pool, batch, 1, sm_count=4)
    assert dg.schedules == [(4, 1)]


def test_the_captured_width_pads_the_block_table_and_keeps_the_logits():
    gen = torch.Generator().manual_seed(1)
    kv_pool = make_kv_pool(32, "cpu")
    batch = make_batch([100, 180], 2, torch.randperm(32, generator=gen), "cpu", gen)
    wide = chunking.widened(batch, 1024)
    assert wide.block_table.shape == (4, 16) and wide.max_context_len == 1024
    assert torch.equal(wide.block_table[:, :3], batch.block_table)
    dg = StandInDeepGEMM(kv_pool)
    narrow = chunking.one_call(dg, kv_pool, batch, 1, None).view(4, -1)
    padded = chunking.one_call(dg, kv_pool, wide, 1, None).view(4, -1)
    assert attended_equal(batch, narrow, padded[:, : narrow.shape[1]])


def test_the_grid_times_only_cases_with_chunks_smallest_first():
    args = argparse.Namespace(
        next_n=[1, 2, 3, 6],
        batch_sizes=[16, 32, 64, 128],
        ctx=[2048, 131072],
        num_sms=132,
        max_batch_tokens=64 * 131072,
    )
    picked = chunking.cases(args)
    assert all(n * b > 132 for n, b, _ in picked)
    assert (1, 128, 2048) not in picked  # 128 rows: one call in 0.5.23 too
    assert (6, 128, 131072) not in picked  # over the KV-token limit
    assert (6, 32, 2048) in picked and (2, 128, 2048) in picked
    reads = [n * b * c for n, b, c in picked]
    assert reads == sorted(reads)


# ---------------------------------------------------------------- --engine: the engine's calls


def test_the_engine_cases_are_the_issues_sizes_and_their_arms():
    assert (3, 96, 16384, "uniform") in chunking.ENGINE_CASES and (1, 256, 16384, "uniform") in chunking.ENGINE_CASES
    # next_n 3 x 96: 288 one-token rows, both orders, one call and chunks
    assert chunking.engine_arms(96, 3, 132) == [
        (1, "request", "one_call"),
        (1, "request", "chunks"),
        (1, "token", "one_call"),
        (1, "token", "chunks"),
    ]
    # next_n 4 x 64: 256 one-token rows (chunked), 128 two-token rows (one call in 0.5.23 too)
    arms = chunking.engine_arms(64, 4, 132)
    assert [a for a in arms if a[0] == 2] == [(2, "request", "one_call"), (2, "token", "one_call")]
    assert len([a for a in arms if a[0] == 1]) == 4
    # decode: one row per request, one order
    assert chunking.engine_arms(160, 1, 132) == [(1, "request", "one_call"), (1, "request", "chunks")]


def test_engine_lengths_are_engine_abs_prompts_plus_the_drafts():
    assert chunking.engine_lengths(3, 16384, "uniform", 3) == [16387] * 3
    ragged = chunking.engine_lengths(64, 32768, "ragged", 3)
    rng = random.Random("64-32768-ragged")  # engine_ab's Case.requests seeds its RNG with the case
    assert ragged == [rng.randint(16384, 32768) + 3 for _ in range(64)]
    assert chunking.padded_lengths(8, 2, 4096, 4) == [4100, 4100] + [5] * 6
    assert chunking.engine_graph_width(16384) % 64 == 0 and 16384 + 1024 < chunking.engine_graph_width(16384) <= 17600


def test_contiguous_pages_keep_each_requests_pages_in_a_row():
    gen = torch.Generator().manual_seed(0)
    pages = chunking.page_ranges([100, 64, 200], 10, "contiguous", gen, "cpu")
    assert pages.tolist() == list(range(10, 17))
    shuffled = chunking.page_ranges([100, 64, 200], 10, "scattered", gen, "cpu")
    assert sorted(shuffled.tolist()) == list(range(10, 17)) and shuffled.tolist() != pages.tolist()


@pytest.mark.parametrize(("next_n", "tokens"), [(3, 1), (4, 1), (4, 2), (6, 2)])
def test_token_major_rows_give_the_engines_logits_back_in_its_order(next_n, tokens):
    order = chunking.token_major(5, next_n, tokens)
    assert sorted(order) == list(range(5 * next_n))
    assert order[:tokens] == list(range(tokens)) and order[tokens : 2 * tokens] == [next_n + t for t in range(tokens)]
    gen = torch.Generator().manual_seed(next_n)
    kv_pool = make_kv_pool(96, "cpu")
    batch = make_batch([random.Random(j).randint(70, 300) for j in range(5)], next_n, torch.arange(96), "cpu", gen)
    dg = StandInDeepGEMM(kv_pool)
    moved = chunking.reordered(batch, order)
    whole = chunking.one_call(dg, kv_pool, batch, tokens, None).view(5 * next_n, -1)
    back = chunking.one_call(dg, kv_pool, moved, tokens, None).view(5 * next_n, -1)[chunking.inverse(order)]
    assert attended_equal(batch, whole, back)
    assert chunking.engine_logits_identical(dg, kv_pool, batch, chunking.engine_arms(5, next_n, 4), sm_count=4)


def test_the_kernel_time_counts_the_paged_mqa_kernels_the_engine_profile_counts():
    events = [
        ("void deep_gemm::sm90_fp8_paged_mqa_logits<1u, 64u>", 30.0),
        ("void deep_gemm::sm90_fp8_paged_mqa_logits<1u, 64u>", 50.0),
        ("deep_gemm::paged_mqa_logits_metadata", 5.0),
        ("void at::native::CatArrayBatchedCopy", 7.0),
    ]
    assert chunking.kernel_us(events, calls=2) == 40.0


def test_the_summary_compares_each_arm_with_the_engines_pristine_call():
    arm = lambda t, o, c, us: {"tokens": t, "order": o, "call": c, "kernel_us": us, "graph_us": us + 5}  # noqa: E731
    row = {"next_n": 3, "batch_size": 96, "real_requests": 96, "ctx": 16384, "lengths": "uniform"}
    row["arms"] = [
        arm(1, "request", "one_call", 142.0),
        arm(1, "request", "chunks", 106.0),
        arm(1, "token", "one_call", 100.0),
    ]
    summary = chunking.engine_summary([row])["n3-96of96-16k-uniform"]
    assert summary["1/row request-major chunks"] == 1.0 and summary["1/row request-major one_call"] == 1.34
    assert summary["over"] == "kernel_us"


@pytest.mark.parametrize(
    ("device", "suffix"),
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA B200", "gpu"), ("", "gpu")],
)
def test_a_result_file_names_the_card_its_run_recorded(tmp_path, device, suffix):
    """A call that asked for an H200 ran on an H100 (5 Dec 2026): the kernel benches wrote *_h200 whatever the card."""
    chunking.write({"device": device, "rows": []}, str(tmp_path), "paged_mqa_engine_calls")
    assert [p.name for p in tmp_path.iterdir()] == [f"paged_mqa_engine_calls_{suffix}.json"]
