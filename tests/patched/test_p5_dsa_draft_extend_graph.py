"""Patch 5: the DSA draft-extend pass as a CUDA graph (CPU checks).

Drives sglang's own DSA backend metadata, the real ``EAGLEDraftExtendCudaGraphRunner`` and
``EagleDraftWorker`` (``_capture_cuda_graphs``, ``_draft_extend_for_decode``) with CPU tensors;
the stand-ins (graph backend, decoder layer, DeepGEMM) are described in ``p56_support``.
Eager is the reference throughout: the same batch through ``init_forward_metadata`` and the
model, as sglang 0.5.14 runs every DSA draft-extend.
"""

from __future__ import annotations

from types import SimpleNamespace

import p12_support as S
import p56_support as T
import pytest
import torch

ForwardMode = S.ForwardMode


def _capture_draft_extend_metadata(backend, bs, next_n):
    """Capture-time metadata for ``bs`` requests, as the runner builds it (fill lengths of 1)."""
    backend.init_cuda_graph_state(max_bs=bs, max_num_tokens=bs * next_n)
    lens = torch.ones(bs, dtype=torch.int64)
    capture = SimpleNamespace(
        batch_size=bs,
        req_pool_indices=torch.zeros(bs, dtype=torch.int64),
        seq_lens=lens,
        seq_lens_cpu=None,
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        spec_info=None,
    )
    backend.init_forward_metadata_out_graph(capture, in_capture=True)
    return backend.decode_cuda_graph_metadata[bs]


def _replay_draft_extend_metadata(backend, bs, fb):
    """Replay-time metadata for ``fb`` padded to ``bs`` rows, as the runner hands it over: padded rows
    carry the fill length 1 and request slot 0; ``spec_info`` carries the (ragged) accepted lengths."""
    raw = fb.batch_size
    pad = bs - raw
    lens = torch.cat([fb.seq_lens, torch.ones(pad, dtype=torch.int64)])
    view = SimpleNamespace(
        batch_size=bs,
        req_pool_indices=torch.cat([fb.req_pool_indices, torch.zeros(pad, dtype=torch.int64)]),
        seq_lens=lens,
        seq_lens_cpu=lens.clone(),
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        spec_info=fb.spec_info,
    )
    backend.init_forward_metadata_out_graph(view)
    return backend.forward_metadata


def _in_place_facts(meta):
    return (
        meta.paged_mqa_ctx_lens_2d.data_ptr(),
        tuple(meta.paged_mqa_ctx_lens_2d.shape),
        meta.paged_mqa_schedule_metadata.data_ptr(),
        meta.dsa_seqlens_expanded.data_ptr(),
        meta.page_table_1.data_ptr(),
    )


@pytest.mark.parametrize("next_n", [2, 4])
@pytest.mark.parametrize("raw_bs", [4, 3, 1])
def test_replayed_metadata_is_the_eager_metadata(monkeypatch, next_n, raw_bs):
    """DRAFT_EXTEND_V2 replay metadata: every request extends by next_n tokens, whatever it accepted;
    equal to eager's on the real rows, refreshed in place, padded rows reading KV slot 0."""
    T.install(monkeypatch, next_n)
    bs = 4
    seq_lens = T.seq_lens_for(raw_bs, next_n, seed=raw_bs)
    accept = [1 + i % next_n for i in range(raw_bs)]  # ragged: must not shape the metadata
    graph = T.make_backend(next_n)
    captured = _capture_draft_extend_metadata(graph, bs, next_n)
    at_capture = _in_place_facts(captured)
    meta = _replay_draft_extend_metadata(graph, bs, T.draft_extend_batch(next_n, seq_lens, accept))
    assert meta is captured and _in_place_facts(meta) == at_capture

    eager = T.make_backend(next_n)
    eager.init_forward_metadata(T.draft_extend_batch(next_n, seq_lens, accept))
    ref = eager.forward_metadata
    rows = raw_bs * next_n
    assert meta.cache_seqlens_int32[:raw_bs].tolist() == ref.cache_seqlens_int32.tolist()
    assert meta.dsa_seqlens_expanded[:rows].tolist() == ref.dsa_seqlens_expanded.tolist()
    assert meta.dsa_cache_seqlens_int32[:rows].tolist() == ref.dsa_cache_seqlens_int32.tolist()
    assert meta.dsa_cu_seqlens_k[: rows + 1].tolist() == ref.dsa_cu_seqlens_k.tolist()
    width = ref.page_table_1.shape[1]
    assert torch.equal(meta.page_table_1[:rows, :width], ref.page_table_1)
    pages = ref.real_page_table.shape[1]
    assert torch.equal(meta.real_page_table[:rows, :pages], ref.real_page_table)
    # one kernel row per token; the schedule refreshed from these very lengths
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n, 1)
    assert meta.paged_mqa_ctx_lens_2d[:rows, 0].tolist() == ref.dsa_seqlens_expanded.tolist()
    # padded rows: their draft tokens see 1..next_n keys of request slot 0 (KV slot 0), never <= 0
    assert meta.dsa_seqlens_expanded[rows:].tolist() == list(range(1, next_n + 1)) * (bs - raw_bs)
    assert not meta.page_table_1[rows:].any()


def test_replay_does_not_depend_on_accepted_lengths(monkeypatch):
    next_n, bs = 4, 4
    T.install(monkeypatch, next_n)
    seq_lens = T.seq_lens_for(bs, next_n, seed=7)
    backend = T.make_backend(next_n)
    _capture_draft_extend_metadata(backend, bs, next_n)
    seen = []
    for accept in ([1, 1, 1, 1], [4, 4, 4, 4], [2, 4, 1, 3]):
        meta = _replay_draft_extend_metadata(backend, bs, T.draft_extend_batch(next_n, seq_lens, accept))
        seen.append((meta.dsa_seqlens_expanded.clone(), meta.page_table_1.clone(), meta.cache_seqlens_int32.clone()))
    for other in seen[1:]:
        assert all(torch.equal(a, b) for a, b in zip(seen[0], other, strict=True))


# --------------------------------------------------------------------------
# The real draft-extend graph runner on the DSA backend
# --------------------------------------------------------------------------


def _graph_and_eager(monkeypatch, next_n, raw_bs, capture_bs=(2, 4), index_share=False):
    T.install(monkeypatch, next_n)
    decoder = T.IndexerDecoder(seed=next_n)
    worker = T.draft_worker(next_n, decoder, T.make_backend(next_n), index_share=index_share)
    runner = T.make_runner(monkeypatch, worker, capture_bs)
    seq_lens = T.seq_lens_for(raw_bs, next_n, seed=raw_bs)
    accept = [1 + (2 * i) % next_n for i in range(raw_bs)]
    fb = T.draft_extend_batch(next_n, seq_lens, accept)
    ref = T.run_eager(worker, T.draft_extend_batch(next_n, seq_lens, accept))
    return runner, worker, decoder, fb, ref


@pytest.mark.parametrize("next_n", [2, 3, 4])
@pytest.mark.parametrize("raw_bs", [1, 2, 3, 4])
def test_graph_replay_equals_eager(monkeypatch, next_n, raw_bs):
    """Captured at 2 and 4 requests; 1 and 3 replay padded. Logits, hidden states and the indexer's
    top-k of every real token are eager's."""
    runner, _, decoder, fb, ref = _graph_and_eager(monkeypatch, next_n, raw_bs)
    eager_topk = decoder.last_topk
    assert runner.can_run_graph(fb)
    out = runner.execute(fb)
    assert runner.backend.replayed == [2 if raw_bs <= 2 else 4]
    rows = raw_bs * next_n
    # the same keys per token (rows shorter than the top-k hold zero-score ties in any order)
    assert torch.equal(decoder.last_topk[:rows].sort(-1).values, eager_topk.sort(-1).values)
    torch.testing.assert_close(out.next_token_logits, ref.next_token_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.hidden_states, ref.hidden_states, rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def _record_topk(monkeypatch):
    """IndexerDecoder.last_topk: the top-k of its last forward (which it mixes into the hidden states)."""
    forward = T.IndexerDecoder.forward

    def recording(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        self.last_topk = out[2].clone() if out[2] is not None else None
        return out

    monkeypatch.setattr(T.IndexerDecoder, "forward", recording)


def test_one_graph_per_captured_batch_size(monkeypatch):
    runner, *_ = _graph_and_eager(monkeypatch, 3, 1, capture_bs=(1, 2, 4))
    assert sorted(key.size for key in runner.backend.graphs) == [1, 2, 4]
    assert runner.max_bs == 4 and runner.num_tokens_per_bs == 3


def test_batch_beyond_the_graphs_runs_eagerly(monkeypatch):
    """The worker's eager fallback: a batch larger than the largest graph is refused by can_run_graph,
    gets eager metadata and the eager forward, and gives eager's results."""
    next_n = 3
    runner, worker, _, fb, _ = _graph_and_eager(monkeypatch, next_n, 5)
    accept = [1 + (2 * i) % next_n for i in range(5)]
    assert runner.can_run_graph(fb) is False
    got = T.run_draft_extend_for_decode(worker, fb, accept)
    assert runner.backend.replayed == [] and worker.draft_runner.eager_forwards == 1

    eager_fb = T.draft_extend_batch(next_n, fb.seq_lens.tolist(), accept)
    ref = T.run_eager(worker, eager_fb)
    rows = T.last_verified_rows(accept, next_n)
    assert got.topk_index[:, 0].tolist() == ref.next_token_logits[rows].argmax(-1).tolist()
    torch.testing.assert_close(got.hidden_states, ref.hidden_states[rows])


@pytest.mark.parametrize("raw_bs", [1, 3, 4])
def test_worker_replays_and_gets_eager_next_draft_input(monkeypatch, raw_bs):
    next_n = 4
    runner, worker, _, fb, ref = _graph_and_eager(monkeypatch, next_n, raw_bs)
    accept = fb.spec_info.num_accept_tokens.tolist()
    got = T.run_draft_extend_for_decode(worker, fb, accept)
    assert len(runner.backend.replayed) == 1 and worker.draft_runner.eager_forwards == 0
    rows = T.last_verified_rows(accept, next_n)
    assert got.topk_index[:, 0].tolist() == ref.next_token_logits[rows].argmax(-1).tolist()
    torch.testing.assert_close(got.hidden_states, ref.hidden_states[rows], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# The worker captures a draft-extend graph for the DSA backend
# --------------------------------------------------------------------------


def test_worker_captures_the_dsa_draft_extend_graph(monkeypatch):
    next_n = 3
    T.install(monkeypatch, next_n)
    worker = T.draft_worker(next_n, T.IndexerDecoder(), T.make_backend(next_n), index_share=False)
    runner = T.capture_worker_graphs(monkeypatch, worker, [1, 2, 4])
    assert isinstance(runner, T.graph_mod.EAGLEDraftExtendCudaGraphRunner)
    assert runner.draft_extend_attn_backend is worker.draft_extend_attn_backend
    assert sorted(key.size for key in runner.backend.graphs) == [1, 2, 4]
    assert worker.cuda_graph_runner is not None  # the draft-decode graph, as before


def test_no_dsa_draft_extend_graph_off_cuda(monkeypatch):
    next_n = 3
    T.install(monkeypatch, next_n)
    worker = T.draft_worker(next_n, T.IndexerDecoder(), T.make_backend(next_n), index_share=False)
    assert T.capture_worker_graphs(monkeypatch, worker, [2], cuda=False) is None


def test_other_backends_keep_their_decision(monkeypatch):
    next_n = 3
    T.install(monkeypatch, next_n)
    worker = T.draft_worker(next_n, T.IndexerDecoder(), T.make_backend(next_n), index_share=False)
    worker.draft_extend_attn_backend = SimpleNamespace()  # a backend without draft-extend graphs
    assert T.capture_worker_graphs(monkeypatch, worker, [2]) is None


# --------------------------------------------------------------------------
# IndexShare: the draft loop after draft-extend is seeded, whichever path ran
# --------------------------------------------------------------------------


@pytest.mark.parametrize("raw_bs", [3, 5])
def test_seeding_worker_still_seeds_the_draft_loop(monkeypatch, raw_bs):
    """With index_share_for_mtp_iteration the next draft loop gets each request's last verified token's
    indexer row, exactly eager's, whether this draft-extend replayed a graph or ran eagerly."""
    next_n = 3
    T.install(monkeypatch, next_n)
    decoder = T.IndexerDecoder(seed=5)
    worker = T.draft_worker(next_n, decoder, T.make_backend(next_n), index_share=True)
    assert worker.seed_dsa_topk_from_draft_extend
    T.capture_worker_graphs(monkeypatch, worker, [2, 4])
    seq_lens = T.seq_lens_for(raw_bs, next_n, seed=9)
    accept = [1 + i % next_n for i in range(raw_bs)]
    got = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(next_n, seq_lens, accept), accept)

    ref_fb = T.draft_extend_batch(next_n, seq_lens, accept)
    rows = T.last_verified_rows(accept, next_n)
    ref_fb.spec_info.dsa_seed_topk_select = rows
    T.run_eager(worker, ref_fb)
    assert got.dsa_topk_indices is not None and got.dsa_topk_indices.dtype == torch.int32
    assert torch.equal(got.dsa_topk_indices, ref_fb.spec_info.dsa_seed_topk_capture)
