"""v0.5.23 line, patch 1: Indexer._get_topk_paged calls DeepGEMM in the rows
dsa_backend chose.

The real 0.5.23 indexer method runs under a real forward context; only the
DeepGEMM entry points are a recording stand-in (FakeDeepGemm, which enforces
SM90's two-tokens-per-row limit and the schedule/context-length match and
computes logits in plain torch), so the returned top-k can be compared with
the per-token path bit for bit.
"""

from __future__ import annotations

import dataclasses

import pytest
import support23 as S
import torch

SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1]
TV = S.ForwardMode.TARGET_VERIFY


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(S.FORCE_ENV, raising=False)


def setup(monkeypatch, arch, next_n, bs, forced=False, cuda_graph=False):
    if forced:
        monkeypatch.setenv(S.FORCE_ENV, "1")
    else:
        monkeypatch.delenv(S.FORCE_ENV, raising=False)
    # 4 SMs: the short test contexts qualify for two tokens per row on SM90
    fake = S.FakeDeepGemm(max_tokens_per_row=S.KERNEL_TOKENS_PER_ROW[arch], num_sms=4)
    S.use_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n)
    seq_lens = (SEQ_LENS * 2)[:bs]
    batch = S.make_forward_batch(TV, seq_lens, next_n)
    return fake, backend, batch


def topk(monkeypatch, arch, next_n, bs, q, w, forced=False, cuda_graph=False, mutate=None):
    fake, backend, batch = setup(monkeypatch, arch, next_n, bs, forced)
    with S.platform(monkeypatch, arch):
        if cuda_graph:
            backend.init_cuda_graph_state(max_bs=32, max_num_tokens=32 * next_n)
            for lens in (torch.ones(bs, dtype=torch.int64), batch.seq_lens):  # capture, replay
                backend._apply_cuda_graph_metadata(
                    bs=bs,
                    req_pool_indices=batch.req_pool_indices,
                    seq_lens=lens,
                    seq_lens_cpu=lens.clone(),
                    forward_mode=TV,
                    spec_info=None,
                )
        else:
            backend.init_forward_metadata(batch)
        metadata = backend.get_indexer_metadata(0, batch)
        if mutate is not None:
            metadata = mutate(metadata)
        out = S.run_topk(backend, batch, q, w, metadata=metadata)
    assert len(fake.fp8_paged_mqa_logits.calls) == 1
    return out, fake.fp8_paged_mqa_logits.calls[0], backend.forward_metadata


@pytest.mark.parametrize(
    "arch,next_n,bs,tokens",
    [
        ("sm90", 2, 8, 2),
        ("sm90", 2, 12, 2),
        ("sm90", 4, 8, 2),
        ("sm90", 6, 10, 2),
        ("sm90", 3, 8, 1),
        ("sm100", 4, 3, 4),
        ("sm80", 4, 8, 1),
    ],
)
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_kernel_call_and_topk_match_per_token(monkeypatch, arch, next_n, bs, tokens, cuda_graph):
    q, w = S.make_queries(bs * next_n, seed=bs * 10 + next_n)
    ref, (ref_args, _), _ = topk(monkeypatch, arch, next_n, bs, q, w, forced=True, cuda_graph=cuda_graph)
    assert ref_args[0].shape[1] == 1

    got, (args, kwargs), meta = topk(monkeypatch, arch, next_n, bs, q, w, cuda_graph=cuda_graph)
    q_arg, kv_arg, w_arg, ctx_arg, table_arg, sched_arg, max_len = args
    rows = bs * next_n // tokens
    assert kwargs == {"clean_logits": False}
    # q viewed [rows, tokens, H, D] without a copy
    assert tuple(q_arg.shape) == (rows, tokens, S.NUM_HEADS, S.HEAD_DIM)
    assert q_arg.data_ptr() == q.data_ptr()
    # the metadata's own context lengths and schedule, not rebuilt
    assert ctx_arg is meta.paged_mqa_ctx_lens_2d
    assert sched_arg is meta.paged_mqa_schedule_metadata
    # every tokens-th block-table row, as a view of the per-token table
    table = meta.real_page_table
    assert table_arg.data_ptr() == table.data_ptr()
    assert torch.equal(table_arg, table[::tokens])
    assert w_arg.shape == (bs * next_n, S.NUM_HEADS)
    assert max_len == table.shape[1] * S.PAGE
    # one top-k row per draft token, identical to the per-token path
    assert got.shape == (bs * next_n, S.INDEX_TOPK)
    assert torch.equal(got, ref)


def test_sm90_never_gets_more_than_two_tokens_per_row(monkeypatch):
    q, w = S.make_queries(64)
    _, (args, _), _ = topk(monkeypatch, "sm90", 8, 8, q, w)
    assert tuple(args[0].shape[:2]) == (32, 2)


def test_rows_that_do_not_divide_next_n_fall_back_to_per_token(monkeypatch):
    # lengths shaped [rows, 4] cannot hold next_n = 6 tokens per request:
    # one token per row, with a schedule rebuilt for the lengths actually passed
    def rows_of_four(meta):
        return dataclasses.replace(meta, paged_mqa_ctx_lens_2d=meta.paged_mqa_ctx_lens_2d.reshape(-1, 4).contiguous())

    q, w = S.make_queries(48, seed=5)
    got, (args, _), _ = topk(monkeypatch, "sm90", 6, 8, q, w, mutate=rows_of_four)
    q_arg, _, _, ctx_arg, _, sched_arg, _ = args
    assert tuple(q_arg.shape[:2]) == (48, 1)
    assert ctx_arg.reshape(-1).tolist() == S.expected_token_lengths((SEQ_LENS * 2)[:8], 6)
    assert torch.equal(sched_arg[0], S.FakeDeepGemm._fingerprint(ctx_arg))
    ref, _, _ = topk(monkeypatch, "sm90", 6, 8, q, w, forced=True)
    assert torch.equal(got, ref)


def test_padded_q_keeps_rows_and_pads_output(monkeypatch):
    # dp-attention / MAX_LEN padding: q has more rows than the batch's tokens
    q, w = S.make_queries(32 + 5, seed=3)
    got, (args, _), _ = topk(monkeypatch, "sm90", 4, 8, q, w)
    assert tuple(args[0].shape[:2]) == (16, 2)
    assert got.shape == (37, S.INDEX_TOPK)
    assert bool((got[32:] == -1).all())
    ref, _, _ = topk(monkeypatch, "sm90", 4, 8, q, w, forced=True)
    assert torch.equal(got, ref)
