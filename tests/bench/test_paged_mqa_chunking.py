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
