"""v0.5.23 line, patch 2: Indexer._get_topk_paged calls DeepGEMM in the rows
dsa_backend chose.

The real 0.5.23 indexer method runs under a real forward context; only the
DeepGEMM entry points are a recording stand-in (FakeDeepGemm, which enforces
SM90's two-tokens-per-row limit and the schedule/context-length match and
computes logits in plain torch), and, where named, 0.5.23's JIT top-k v2
(support23.TopKV2), so the returned top-k can be compared with the per-token
path bit for bit. Odd next_n runs one token per row, eager and under a
CUDA-graph capture.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import support23 as S
import torch

SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1]
TV = S.ForwardMode.TARGET_VERIFY


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(S.FORCE_ENV, raising=False)


def setup(monkeypatch, arch, next_n, bs, forced=False):
    if forced:
        monkeypatch.setenv(S.FORCE_ENV, "1")
    else:
        monkeypatch.delenv(S.FORCE_ENV, raising=False)
    # 4 SMs: the short test contexts give two tokens per row fewer waves on SM90
    fake = S.FakeDeepGemm(max_tokens_per_row=S.KERNEL_TOKENS_PER_ROW[arch], num_sms=4)
    S.use_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n, num_reqs=64)
    seq_lens = (SEQ_LENS * 4)[:bs]
    batch = S.make_forward_batch(TV, seq_lens, next_n)
    return fake, backend, batch


def prepare(backend, batch, bs, cuda_graph, pool=None):
    if cuda_graph:
        backend.init_cuda_graph_state(max_bs=64, max_num_tokens=64 * backend.speculative_num_draft_tokens)
        for lens in (torch.ones(bs, dtype=torch.int64), batch.seq_lens):  # capture, replay
            backend._apply_cuda_graph_metadata(
                bs=bs,
                req_pool_indices=batch.req_pool_indices if pool is None else pool,
                seq_lens=lens,
                seq_lens_cpu=lens.clone(),
                forward_mode=TV,
                spec_info=None,
            )
    else:
        backend.init_forward_metadata(batch)


def topk(monkeypatch, arch, next_n, bs, q, w, forced=False, cuda_graph=False, mutate=None, top_k_v2=None):
    fake, backend, batch = setup(monkeypatch, arch, next_n, bs, forced)
    if top_k_v2 is not None:
        top_k_v2.install(monkeypatch)
        backend.dsa_topk_backend = S.topk_mod.DSATopKBackend.SGL_KERNEL
        backend.use_fused_topk = True
    with S.platform(monkeypatch, arch):
        prepare(backend, batch, bs, cuda_graph)
        metadata = backend.get_indexer_metadata(0, batch)
        if mutate is not None:
            metadata = mutate(metadata)
        out = S.run_topk(backend, batch, q, w, metadata=metadata)
    calls = fake.fp8_paged_mqa_logits.calls
    # 0.5.23 splits more than sm_count (132) kernel rows over several calls, on every GPU (the line keeps that)
    rows = sum(args[0].shape[0] for args, _ in calls)
    assert len(calls) == -(-rows // 132), len(calls)
    return out, calls[-1], backend.forward_metadata


@pytest.mark.parametrize(
    "arch,next_n,bs,tokens",
    [
        ("sm90", 2, 16, 2),
        ("sm90", 2, 20, 2),
        ("sm90", 4, 8, 2),
        ("sm90", 6, 6, 2),
        ("sm90", 2, 8, 1),
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
    assert torch.equal(table_arg, table[: bs * next_n : tokens])
    assert w_arg.shape == (bs * next_n, S.NUM_HEADS)
    assert max_len == table.shape[1] * S.PAGE
    # one top-k row per draft token, identical to the per-token path
    assert got.shape == (bs * next_n, S.INDEX_TOPK)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("next_n,bs", [(3, 33), (5, 32)])
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_odd_next_n_runs_one_token_per_row(monkeypatch, next_n, bs, cuda_graph):
    # batch sizes where the previous revision of this patch took pairs plus a tail
    q, w = S.make_queries(bs * next_n, seed=next_n)
    ref, _, _ = topk(monkeypatch, "sm90", next_n, bs, q, w, forced=True, cuda_graph=cuda_graph)
    fake, backend, batch = setup(monkeypatch, "sm90", next_n, bs)
    with S.platform(monkeypatch, "sm90"):
        prepare(backend, batch, bs, cuda_graph)
        got = S.run_topk(backend, batch, q, w)
    meta = backend.forward_metadata
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n, 1)
    calls = fake.fp8_paged_mqa_logits.calls
    assert all(args[0].shape[1] == 1 for args, _ in calls)
    assert sum(args[0].shape[0] for args, _ in calls) == bs * next_n
    assert got.shape == (bs * next_n, S.INDEX_TOPK)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("next_n,bs", [(2, 16), (4, 8), (6, 6)])
def test_rows_through_the_top_k_v2_match_per_token(monkeypatch, next_n, bs):
    # 0.5.23's default top-k maps scores row i through page-table row i with a per-forward plan:
    # two-token kernel rows still give one scores row per draft token
    q, w = S.make_queries(bs * next_n, seed=17 + next_n)
    v2 = S.TopKV2()
    ref, (ref_args, _), _ = topk(monkeypatch, "sm90", next_n, bs, q, w, forced=True, top_k_v2=v2)
    got, (args, _), _ = topk(monkeypatch, "sm90", next_n, bs, q, w, top_k_v2=v2)
    assert ref_args[0].shape[1] == 1 and args[0].shape[1] == 2
    assert v2.calls[-1]["rows"] == bs * next_n
    assert bool((ref >= 0).any())  # slots, not positions
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
    assert ctx_arg.reshape(-1).tolist() == S.expected_token_lengths((SEQ_LENS * 4)[:8], 6)
    assert torch.equal(sched_arg[0], S.FakeDeepGemm._fingerprint(ctx_arg))
    ref, _, _ = topk(monkeypatch, "sm90", 6, 8, q, w, forced=True)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("next_n,bs", [(4, 8), (2, 16)])
def test_padded_q_keeps_rows_and_pads_output(monkeypatch, next_n, bs):
    # dp-attention / MAX_LEN padding: q has more rows than the batch's tokens
    q, w = S.make_queries(bs * next_n + 5, seed=3)
    got, (args, _), _ = topk(monkeypatch, "sm90", next_n, bs, q, w)
    assert args[0].shape[1] == 2
    assert got.shape == (bs * next_n + 5, S.INDEX_TOPK)
    assert bool((got[bs * next_n :] == -1).all())
    ref, _, _ = topk(monkeypatch, "sm90", next_n, bs, q, w, forced=True)
    assert torch.equal(got, ref)


# --- padded batches (DP attention, CUDA-graph buckets): real rows unchanged ---------------------


def padded_forward_batch(backend, seq_lens, next_n, padded_bs):
    """A real ForwardBatch of ``seq_lens`` padded to ``padded_bs`` requests by sglang's own
    ForwardBatch._pad_inputs_to_size (the DP-attention path), without host lengths as 0.5.23's
    spec-v2 target_verify has them."""
    bs = len(seq_lens)
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    fb = S.fbi.ForwardBatch(
        forward_mode=TV,
        batch_size=bs,
        input_ids=torch.zeros(bs * next_n, dtype=torch.int64),
        req_pool_indices=torch.arange(1, bs + 1),
        seq_lens=lens,
        seq_lens_cpu=None,
        out_cache_loc=torch.zeros(bs * next_n, dtype=torch.int64),
        seq_lens_sum=int(lens.sum()),
        positions=torch.zeros(bs * next_n, dtype=torch.int64),
    )
    fb.batch_size = padded_bs
    fb._pad_inputs_to_size(types.SimpleNamespace(attn_backend=backend), padded_bs * next_n, padded_bs)
    assert fb.seq_lens.shape[0] == padded_bs and fb.req_pool_indices.shape[0] == padded_bs
    return fb


@pytest.mark.parametrize(
    "next_n,real,padded,tokens", [(2, 13, 16, 2), (4, 5, 8, 2), (6, 5, 6, 2), (3, 29, 32, 1), (5, 30, 32, 1)]
)
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_padded_batch_keeps_real_rows(monkeypatch, next_n, real, padded, tokens, cuda_graph):
    q, w = S.make_queries(padded * next_n, seed=real)
    ref, _, _ = topk(
        monkeypatch, "sm90", next_n, real, q[: real * next_n], w[: real * next_n], forced=True, cuda_graph=cuda_graph
    )
    fake, backend, _ = setup(monkeypatch, "sm90", next_n, real)
    batch = padded_forward_batch(backend, (SEQ_LENS * 4)[:real], next_n, padded)
    if cuda_graph:  # the graph runner's padding: the same fill value and pool index 0
        batch.seq_lens_cpu = batch.seq_lens.clone()
    with S.platform(monkeypatch, "sm90"):
        prepare(backend, batch, padded, cuda_graph)
        got = S.run_topk(backend, batch, q, w)
    (q_arg, *_), _ = fake.fp8_paged_mqa_logits.calls[0]
    assert q_arg.shape[1] == tokens
    assert torch.equal(got[: real * next_n], ref)
