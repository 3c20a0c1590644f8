"""bench/studies/odd_split.py's rows on CPU: the two calls of the split see exactly per-token's tokens.

DeepGEMM does not run here; a stand-in computes each row's logits in plain torch from the same
inputs (q, weights, context lengths, block-table rows), so the split's reassembled logits must equal
per-token's wherever a token attends.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from bench.paged_mqa import DIM, HEADS, make_batch, make_kv_pool  # noqa: E402
from bench.studies import odd_split  # noqa: E402
from testing.paged_mqa_reference import ReferencePagedMQA  # noqa: E402


@pytest.mark.parametrize("next_n", [3, 5])
def test_the_split_computes_every_token_of_per_token_once(next_n):
    gen = torch.Generator().manual_seed(0)
    kv_pool = make_kv_pool(64, "cpu")
    lengths = [random.Random(next_n).randint(70, 300) for _ in range(3)]
    batch = make_batch(lengths, next_n, torch.randperm(64, generator=gen), "cpu", gen)
    kernel = ReferencePagedMQA(kv_pool)
    per_token = kernel(
        batch.q_fp8.view(-1, 1, HEADS, DIM),
        kv_pool,
        batch.weights,
        batch.ctx_lens.view(-1, 1),
        batch.block_table,
        None,
        batch.max_context_len,
    )
    (pair_q, pair_w), (tail_q, tail_w) = odd_split.split_queries(batch)
    (pair_ctx, pair_table), (tail_ctx, tail_table) = odd_split.split_rows(batch)
    assert pair_q.shape == (3 * (next_n - 1) // 2, 2, HEADS, DIM) and tail_q.shape == (3, 1, HEADS, DIM)
    assert pair_q.is_contiguous() and tail_q.is_contiguous() and pair_w.is_contiguous()
    pairs = kernel(pair_q, kv_pool, pair_w, pair_ctx, pair_table, None, batch.max_context_len)
    tail = kernel(tail_q, kv_pool, tail_w, tail_ctx, tail_table, None, batch.max_context_len)
    merged = odd_split.split_to_token_order(batch, pairs, tail)
    assert odd_split.attended_equal(batch, per_token, merged)
    assert not odd_split.attended_equal(batch, per_token, merged.roll(1, 0))  # the check can fail


def test_the_split_refuses_even_next_n():
    gen = torch.Generator().manual_seed(0)
    batch = make_batch([100, 200], 4, torch.arange(8), "cpu", gen)
    with pytest.raises(AssertionError, match="odd next_n"):
        odd_split.split_rows(batch)


def test_the_committed_h200_run_is_drawn_and_its_logits_matched(tmp_path):
    import json

    import matplotlib.image

    from sglpatch.project import PROJECT_ROOT

    committed = PROJECT_ROOT / "docs" / "results" / "odd_split_h200.json"
    rows = json.loads(committed.read_text())["rows"]
    assert len(rows) == 48 and all(r["logits_identical"] for r in rows)
    assert odd_split.main(["--rerender", str(committed), "--out", str(tmp_path)]) == 0
    height, width, _ = matplotlib.image.imread(tmp_path / "odd_split_h200.png").shape
    assert width > height > 500
