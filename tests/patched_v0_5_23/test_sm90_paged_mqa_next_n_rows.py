"""v0.5.23 line, patch 2: SM90 target_verify runs odd next_n as [B, next_n] rows when DeepGEMM takes them.

The real 0.5.23 backend and indexer (patched); DeepGEMM is FakeDeepGemm with a limit on query tokens per
row: 2 for stock SM90 DeepGEMM (it refuses more, as its host check does), 6 for a build whose kernel
reads each KV tile once for all of a request's draft tokens. The backend asks a probe (one real call,
here to a stand-in of its own with the same limit) once per process; the answer decides odd next_n
only, even next_n keep patch 1's pairs; the force switch still wins; the probe never calls DeepGEMM
while a CUDA graph is being captured.
"""

from __future__ import annotations

import contextlib

import pytest
import support23 as S
import torch

SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1]
TV = S.ForwardMode.TARGET_VERIFY
STOCK, READ_ONCE = 2, 6  # query tokens per row SM90 DeepGEMM takes


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(S.FORCE_ENV, raising=False)


def lens_of(bs):
    return (SEQ_LENS * 20)[:bs]


@contextlib.contextmanager
def capturing(monkeypatch):
    """What torch says while a CUDA graph is being captured."""
    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        yield


def run(monkeypatch, next_n, bs, max_tokens, cuda_graph=False, forced=False, ask_first=True):
    """One indexer step on SM90: (top-k, the indexer's DeepGEMM calls, the probe's, the metadata).

    ``ask_first``: the backend asks the probe before the capture, as its __init__ does."""
    if forced:
        monkeypatch.setenv(S.FORCE_ENV, "1")
    else:
        monkeypatch.delenv(S.FORCE_ENV, raising=False)
    fake = S.FakeDeepGemm(max_tokens_per_row=max_tokens, num_sms=4)
    probed = S.use_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n, num_reqs=max(16, bs))
    batch = S.make_forward_batch(TV, lens_of(bs), next_n)
    q, w = S.make_queries(bs * next_n, seed=bs * 10 + next_n)
    with S.platform(monkeypatch, "sm90"):
        if ask_first:
            backend._paged_mqa_tokens_per_row(TV, 1)
        asked = len(probed.fp8_paged_mqa_logits.calls)
        if cuda_graph:
            backend.init_cuda_graph_state(max_bs=max(16, bs), max_num_tokens=max(16, bs) * next_n)
            with capturing(monkeypatch):
                for lens in (torch.ones(bs, dtype=torch.int64), batch.seq_lens):  # capture, replay
                    backend._apply_cuda_graph_metadata(
                        bs=bs,
                        req_pool_indices=batch.req_pool_indices,
                        seq_lens=lens,
                        seq_lens_cpu=lens.clone(),
                        forward_mode=TV,
                        spec_info=None,
                    )
            assert len(probed.fp8_paged_mqa_logits.calls) == asked, "the probe called DeepGEMM under capture"
        else:
            backend.init_forward_metadata(batch)
        out = S.run_topk(backend, batch, q, w)
    return out, fake.fp8_paged_mqa_logits.calls, probed.fp8_paged_mqa_logits.calls, backend.forward_metadata


@pytest.mark.parametrize("next_n", [3, 5])
@pytest.mark.parametrize("max_tokens,tokens", [(READ_ONCE, None), (STOCK, 1)], ids=["read-once", "stock"])
def test_the_backend_asks_deepgemm_once_and_odd_next_n_follow_its_answer(monkeypatch, next_n, max_tokens, tokens):
    probed = S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=max_tokens))
    backend = S.make_backend(next_n)
    with S.platform(monkeypatch, "sm90"):
        choices = {backend._paged_mqa_tokens_per_row(TV, bs) for bs in (1, 8, 64, 512)}
    assert choices == {tokens or next_n}
    shapes = [tuple(args[0].shape[:2]) for args, _ in probed.fp8_paged_mqa_logits.calls]
    # one request of next_n tokens, then (if it returned) the same tokens one per row to compare
    assert shapes == ([(1, next_n), (next_n, 1)] if max_tokens == READ_ONCE else [(1, next_n)])


@pytest.mark.parametrize("next_n,bs", [(3, 8), (5, 6), (3, 140)])
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_odd_next_n_run_one_row_per_request_where_deepgemm_takes_it(monkeypatch, next_n, bs, cuda_graph):
    ref, ref_calls, _, _ = run(monkeypatch, next_n, bs, READ_ONCE, cuda_graph, forced=True)
    assert all(args[0].shape[1] == 1 for args, _ in ref_calls)
    got, calls, _, meta = run(monkeypatch, next_n, bs, READ_ONCE, cuda_graph)
    ctx = meta.paged_mqa_ctx_lens_2d
    assert tuple(ctx.shape) == (bs, next_n)
    assert ctx.reshape(-1).tolist() == S.expected_token_lengths(lens_of(bs), next_n)
    # 0.5.23 splits more rows than SMs (132) into calls, each with a schedule for its own rows
    assert [tuple(args[0].shape[:2]) for args, _ in calls] == [(min(132, bs - s), next_n) for s in range(0, bs, 132)]
    q_arg, _, _, ctx_arg, table_arg, sched_arg, _ = calls[0][0]
    if bs <= 132:
        assert ctx_arg is ctx and sched_arg is meta.paged_mqa_schedule_metadata
        assert torch.equal(table_arg, meta.real_page_table[::next_n])
    assert got.shape == (bs * next_n, S.INDEX_TOPK)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("next_n,bs", [(3, 8), (5, 6)])
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_stock_deepgemm_keeps_one_token_per_row(monkeypatch, next_n, bs, cuda_graph):
    got, calls, probe_calls, meta = run(monkeypatch, next_n, bs, STOCK, cuda_graph)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n, 1)
    assert [tuple(args[0].shape[:2]) for args, _ in calls] == [(bs * next_n, 1)]
    assert [tuple(args[0].shape[:2]) for args, _ in probe_calls] == [(1, next_n)]  # refused
    ref, _, _, _ = run(monkeypatch, next_n, bs, STOCK, cuda_graph, forced=True)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("next_n,bs,rows", [(2, 16, 16), (4, 8, 16), (6, 6, 18), (4, 2, 8)])
def test_even_next_n_keep_pairs_where_deepgemm_takes_next_n(monkeypatch, next_n, bs, rows):
    got, calls, probe_calls, meta = run(monkeypatch, next_n, bs, READ_ONCE)
    tokens = bs * next_n // rows
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (rows, tokens)
    assert [tuple(args[0].shape[:2]) for args, _ in calls] == [(rows, tokens)]
    assert probe_calls == []  # even next_n never read the answer: DeepGEMM is not asked
    ref, _, _, _ = run(monkeypatch, next_n, bs, READ_ONCE, forced=True)
    assert torch.equal(got, ref)


def test_the_force_switch_wins_and_asks_nothing(monkeypatch):
    _, calls, probe_calls, meta = run(monkeypatch, 3, 8, READ_ONCE, forced=True)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (24, 1)
    assert probe_calls == []


def test_a_graph_captured_before_deepgemm_was_asked_keeps_one_token_per_row(monkeypatch):
    # The probe never calls DeepGEMM under capture and remembers nothing there: the capture takes one
    # token per row, its replays keep it; the next eager forward asks, and takes [B, next_n] rows.
    next_n, bs = 3, 8
    got, calls, probe_calls, meta = run(monkeypatch, next_n, bs, READ_ONCE, cuda_graph=True, ask_first=False)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n, 1)
    assert probe_calls == []
    ref, _, _, _ = run(monkeypatch, next_n, bs, READ_ONCE, cuda_graph=True, forced=True)
    assert torch.equal(got, ref)
    _, calls, probe_calls, meta = run(monkeypatch, next_n, bs, READ_ONCE, ask_first=False)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs, next_n)
    assert len(probe_calls) == 2


def test_sm100_and_other_gpus_never_ask(monkeypatch):
    probed = S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=8))
    backend = S.make_backend(3)
    for arch, tokens in (("sm100", 3), ("sm80", 1)):
        with S.platform(monkeypatch, arch):
            assert backend._paged_mqa_tokens_per_row(TV, 8) == tokens
    assert probed.fp8_paged_mqa_logits.calls == []
