"""v0.5.23 line, patch 1: SM90 runs the paged-MQA logits of a forward in one DeepGEMM call.

sglang 0.5.23's Indexer._get_topk_paged splits the logits into calls of at most sm_count rows
(``_chunked_fp8_paged_mqa_logits``), each with a schedule of its own, then joins them with torch.cat;
its comment names an SM100 limit. With the patch, SM90 makes one call over every row with the
forward's own schedule; other GPUs split as before. The real 0.5.23 indexer method runs under a real
forward context; DeepGEMM is the recording stand-in (FakeDeepGemm: it checks that each call's schedule
was made from exactly its context lengths, and computes logits in plain torch).
"""

from __future__ import annotations

import pytest
import support23 as S
import torch

TV = S.ForwardMode.TARGET_VERIFY
SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1]
SM_COUNT = 132  # the indexer's sm_count (support23.make_indexer)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(S.FORCE_ENV, raising=False)


def indexer_step(monkeypatch, arch, next_n, bs, mode=TV):
    """(top-k, the fake's logits calls, the forward's metadata) of one eager indexer step. Odd next_n
    and decode run one token per row on SM90 and on other CUDA GPUs but SM100 (sm80 here)."""
    fake = S.FakeDeepGemm(max_tokens_per_row=S.KERNEL_TOKENS_PER_ROW[arch], num_sms=4)
    S.use_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n, num_reqs=bs)
    batch = S.make_forward_batch(mode, (SEQ_LENS * 20)[:bs], next_n)
    q, w = S.make_queries(bs * max(next_n, 1), seed=bs + next_n)
    with S.platform(monkeypatch, arch):
        backend.init_forward_metadata(batch)
        out = S.run_topk(backend, batch, q, w)
    return out, fake.fp8_paged_mqa_logits.calls, backend.forward_metadata


@pytest.mark.parametrize("next_n,bs", [(3, 50), (5, 30)])
def test_sm90_makes_one_call_over_more_rows_than_sms(monkeypatch, next_n, bs):
    rows = bs * next_n
    assert rows > SM_COUNT
    got, calls, meta = indexer_step(monkeypatch, "sm90", next_n, bs)
    assert len(calls) == 1
    (q, _, _, ctx, table, schedule, _), _ = calls[0]
    assert q.shape[:2] == (rows, 1) and table.shape[0] == rows
    # the forward's own lengths and schedule, made once in the backend's metadata
    assert ctx is meta.paged_mqa_ctx_lens_2d and schedule is meta.paged_mqa_schedule_metadata
    chunked, chunk_calls, _ = indexer_step(monkeypatch, "sm80", next_n, bs)
    assert [args[0].shape[0] for args, _ in chunk_calls] == [min(SM_COUNT, rows - s) for s in range(0, rows, SM_COUNT)]
    assert torch.equal(got, chunked)


def test_sm90_decode_over_more_requests_than_sms_is_one_call(monkeypatch):
    got, calls, _ = indexer_step(monkeypatch, "sm90", 1, 150, mode=S.ForwardMode.DECODE)
    assert [args[0].shape[:2] for args, _ in calls] == [(150, 1)]
    chunked, chunk_calls, _ = indexer_step(monkeypatch, "sm100", 1, 150, mode=S.ForwardMode.DECODE)
    assert len(chunk_calls) == 2
    assert torch.equal(got, chunked)


@pytest.mark.parametrize("arch,mode", [("sm100", S.ForwardMode.DECODE), ("sm80", TV)])
def test_other_gpus_still_split_at_sm_count(monkeypatch, arch, mode):
    next_n = 1 if mode == S.ForwardMode.DECODE else 3
    _, calls, _ = indexer_step(monkeypatch, arch, next_n, 150 // next_n)
    assert [args[0].shape[0] for args, _ in calls] == [132, 18]


def test_no_more_rows_than_sms_is_one_call_everywhere(monkeypatch):
    for arch in ("sm90", "sm80"):
        _, calls, _ = indexer_step(monkeypatch, arch, 3, 44)
        assert len(calls) == 1
