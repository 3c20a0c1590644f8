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


def _replay_draft_extend_metadata(backend, bs, fb, host_lengths="fresh"):
    """Replay-time metadata for ``fb`` padded to ``bs`` rows, as the runner hands it over (padded rows carry
    the fill length 1 and request slot 0; ``spec_info`` carries the ragged accepted lengths), then what the
    graph's first kernels do on replay. ``host_lengths``: the runner's host copy of the lengths is fresh,
    stale (all 1: a batch whose ``seq_lens_cpu`` was not set leaves the previous one) or absent."""
    raw = fb.batch_size
    pad = bs - raw
    lens = torch.cat([fb.seq_lens, torch.ones(pad, dtype=torch.int64)])
    host = {"fresh": lens.clone(), "stale": torch.ones_like(lens), "absent": None}[host_lengths]
    view = SimpleNamespace(
        batch_size=bs,
        req_pool_indices=torch.cat([fb.req_pool_indices, torch.zeros(pad, dtype=torch.int64)]),
        seq_lens=lens,
        seq_lens_cpu=host,
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        spec_info=fb.spec_info,
    )
    backend.init_forward_metadata_out_graph(view)
    backend.init_forward_metadata_in_graph(view)
    return backend.forward_metadata


def _in_place_facts(meta):
    return (
        meta.paged_mqa_ctx_lens_2d.data_ptr(),
        tuple(meta.paged_mqa_ctx_lens_2d.shape),
        meta.paged_mqa_schedule_metadata.data_ptr(),
        meta.dsa_seqlens_expanded.data_ptr(),
        meta.page_table_1.data_ptr(),
        meta.real_page_table.data_ptr(),
        meta.cu_seqlens_k.data_ptr(),
        meta.dsa_cu_seqlens_k.data_ptr(),
    )


def _assert_real_rows_are_eager(meta, ref, seq_lens, next_n):
    """Lengths equal on every real row; page-table rows equal up to each request's key count, the only
    columns a consumer reads (DeepGEMM's logits, the top-k and its page-table transform stop there)."""
    raw_bs = len(seq_lens)
    rows = raw_bs * next_n
    assert meta.cache_seqlens_int32[:raw_bs].tolist() == ref.cache_seqlens_int32.tolist()
    assert meta.cu_seqlens_k[: raw_bs + 1].tolist() == ref.cu_seqlens_k.tolist()
    assert meta.dsa_seqlens_expanded[:rows].tolist() == ref.dsa_seqlens_expanded.tolist()
    assert meta.dsa_cache_seqlens_int32[:rows].tolist() == ref.dsa_cache_seqlens_int32.tolist()
    assert meta.dsa_cu_seqlens_k[: rows + 1].tolist() == ref.dsa_cu_seqlens_k.tolist()
    for row in range(rows):
        keys = seq_lens[row // next_n]
        pages = -(-keys // S.PAGE)
        assert torch.equal(meta.page_table_1[row, :keys], ref.page_table_1[row, :keys]), row
        assert torch.equal(meta.real_page_table[row, :pages], ref.real_page_table[row, :pages]), row


def _eager_metadata(next_n, seq_lens, accept):
    eager = T.make_backend(next_n)
    eager.init_forward_metadata(T.draft_extend_batch(next_n, seq_lens, accept))
    return eager.forward_metadata


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
    _assert_real_rows_are_eager(meta, _eager_metadata(next_n, seq_lens, accept), seq_lens, next_n)
    rows = raw_bs * next_n
    # one kernel row per token; the schedule refreshed from these very lengths
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n, 1)
    assert meta.paged_mqa_ctx_lens_2d[:, 0].tolist() == meta.dsa_seqlens_expanded.tolist()
    # padded rows: their draft tokens see 1..next_n keys of request slot 0 (KV slot 0), never <= 0
    assert meta.dsa_seqlens_expanded[rows:].tolist() == list(range(1, next_n + 1)) * (bs - raw_bs)
    assert not meta.page_table_1[rows:, :next_n].any() and not meta.real_page_table[rows:, 0].any()


@pytest.mark.parametrize("host_lengths", ["stale", "absent"])
def test_replay_reads_no_host_lengths(monkeypatch, host_lengths):
    """Issue 47, Required 2: the replay takes its lengths from the device and its page-table width from the
    capture, so a stale or missing host copy of the lengths (a batch without seq_lens_cpu) changes nothing.
    The previous replay read max(seq_lens_cpu) to size the page-table copy: stale lengths truncated it."""
    next_n, bs = 3, 4
    T.install(monkeypatch, next_n)
    seq_lens = T.seq_lens_for(bs, next_n, seed=11)
    accept = [1, 3, 2, 1]
    graph = T.make_backend(next_n)
    _capture_draft_extend_metadata(graph, bs, next_n)
    fb = T.draft_extend_batch(next_n, seq_lens, accept)
    meta = _replay_draft_extend_metadata(graph, bs, fb, host_lengths=host_lengths)
    _assert_real_rows_are_eager(meta, _eager_metadata(next_n, seq_lens, accept), seq_lens, next_n)


def test_replay_launches_no_metadata_op_outside_the_graph(monkeypatch):
    """Issue 47, Required 4: on replay the out-of-graph metadata step dispatches no torch op and launches no
    kernel; the graph's own kernels (init_forward_metadata_in_graph) refresh the metadata in place."""
    next_n, bs = 4, 4
    T.install(monkeypatch, next_n)
    graph = T.make_backend(next_n)
    _capture_draft_extend_metadata(graph, bs, next_n)
    fills = []
    kernel_mod = T.import_sglang("sglang.srt.layers.attention.dsa.draft_extend_metadata")
    monkeypatch.setattr(kernel_mod, "fill_draft_extend_metadata", lambda **kw: fills.append(kw))
    fb = T.draft_extend_batch(next_n, T.seq_lens_for(bs, next_n, seed=4), [1, 2, 3, 4])
    view = SimpleNamespace(
        batch_size=bs,
        req_pool_indices=fb.req_pool_indices,
        seq_lens=fb.seq_lens,
        seq_lens_cpu=fb.seq_lens_cpu,
        forward_mode=ForwardMode.DRAFT_EXTEND_V2,
        spec_info=fb.spec_info,
    )
    with T.OpCounter() as counter:
        graph.init_forward_metadata_out_graph(view)
    assert counter.total() == 0 and fills == [], dict(counter.ops)
    graph.init_forward_metadata_in_graph(view)
    assert len(fills) == 1 and fills[0]["page_table"].data_ptr() == graph.forward_metadata.page_table_1.data_ptr()


@pytest.mark.parametrize("next_n", [2, 3, 4, 5, 6])
def test_metadata_kernel_writes_each_row_up_to_its_keys(next_n):
    """fill_draft_extend_metadata, run by triton's interpreter, against the torch reference: ragged lengths,
    tables wider than one program's 1024 columns (several programs per request), a padded row (fill length 1,
    request slot 0); every column past a row's key count is left as it was."""
    kernel_mod = T.import_sglang("sglang.srt.layers.attention.dsa.draft_extend_metadata")
    gen = torch.Generator().manual_seed(next_n)
    bs, width, topk, untouched = 5, 2500, 700, -7
    req_to_token = torch.randint(0, 1 << 20, (bs + 3, width + 8), generator=gen, dtype=torch.int32)
    req_to_token[0] = 0
    seq_lens = torch.tensor([width - next_n, 1500, 40, 1025, 1])
    pools = torch.tensor([3, 1, 6, 2, 0])
    rows = bs * next_n
    out = dict(
        cache_seqlens=torch.full((bs,), untouched, dtype=torch.int32),
        cu_seqlens_k=torch.full((bs + 1,), untouched, dtype=torch.int32),
        seqlens_expanded=torch.full((rows,), untouched, dtype=torch.int32),
        dsa_seqlens=torch.full((rows,), untouched, dtype=torch.int32),
        dsa_cu_seqlens=torch.full((rows + 1,), untouched, dtype=torch.int32),
        page_table=torch.full((rows, width), untouched, dtype=torch.int32),
        real_page_table=torch.full((rows, width // S.PAGE + 1), untouched, dtype=torch.int32),
    )
    kernel_mod.fill_draft_extend_metadata(
        seq_lens=seq_lens,
        req_pool_indices=pools,
        req_to_token=req_to_token,
        next_n=next_n,
        topk=topk,
        page_size=S.PAGE,
        **out,
    )
    ref = T.reference_draft_extend_metadata(seq_lens, pools, req_to_token, next_n, topk, S.PAGE)
    for name in ("cache_seqlens", "cu_seqlens_k", "seqlens_expanded", "dsa_seqlens", "dsa_cu_seqlens"):
        assert torch.equal(out[name], getattr(ref, name)), name
    for row, (slots, pages) in enumerate(zip(ref.slots, ref.pages, strict=True)):
        assert torch.equal(out["page_table"][row, : slots.numel()], slots), row
        assert (out["page_table"][row, slots.numel() :] == untouched).all(), row
        assert torch.equal(out["real_page_table"][row, : pages.numel()], pages), row
        assert (out["real_page_table"][row, pages.numel() :] == untouched).all(), row


@pytest.mark.parametrize("bs", [8, 128])
def test_replay_host_work_is_the_runner_copies(monkeypatch, capsys, bs):
    """Issue 47, Required 4: the torch ops one replay dispatches on the host, outside the graph, through the
    real runner's execute: its copies of the batch into the static buffers (two grouped copies, the hidden
    states, the host lengths) and none for the metadata, at 8 and at 128 requests. Inside the graph the
    kernel is the torch reference here (triton's interpreter is slow at 128 requests); only what runs
    outside the graph is counted. ``pytest -s`` prints the counts."""
    next_n = 4
    T.install(monkeypatch, next_n)
    kernel_mod = T.import_sglang("sglang.srt.layers.attention.dsa.draft_extend_metadata")
    monkeypatch.setattr(kernel_mod, "fill_draft_extend_metadata", T.write_reference_draft_extend_metadata)
    backend = S.make_backend(next_n, num_reqs=bs + 1)
    worker = T.draft_worker(next_n, T.IndexerDecoder(seed=1), backend, index_share=False)
    runner = T.make_runner(monkeypatch, worker, (bs,))
    fb = T.draft_extend_batch(next_n, T.seq_lens_for(bs, next_n, seed=1), [1 + i % next_n for i in range(bs)])
    counter = T.OpCounter()
    metadata_ops = []
    out_graph, replay = backend.init_forward_metadata_out_graph, runner._replay_graph

    def counted_out_graph(view):
        before = counter.total()
        out_graph(view)
        metadata_ops.append(counter.total() - before)

    def uncounted_replay(*args):
        counter.paused = True
        try:
            return replay(*args)
        finally:
            counter.paused = False

    monkeypatch.setattr(backend, "init_forward_metadata_out_graph", counted_out_graph)
    monkeypatch.setattr(runner, "_replay_graph", uncounted_replay)
    with counter:
        runner.execute(fb)
    with capsys.disabled():
        print(f"\n{bs} requests: {counter.total()} ops outside the graph {dict(counter.ops)}, metadata {metadata_ops}")
    assert runner.backend.replayed == [bs]
    assert metadata_ops == [0]
    assert counter.total() <= 4, dict(counter.ops)


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


def test_graphs_of_every_size_share_their_page_tables(monkeypatch):
    """Issue 47, Required 3: the real page table, like the token-level one, is one buffer of the largest
    graph's rows that every captured size takes its rows of (one per size would add up to the sum of the
    sizes); replays of other sizes in between still give eager's results (test_graph_replay_equals_eager)."""
    next_n = 3
    runner, *_ = _graph_and_eager(monkeypatch, next_n, 1, capture_bs=(1, 2, 4))
    graphs = runner.draft_extend_attn_backend.decode_cuda_graph_metadata
    for table in ("page_table_1", "real_page_table"):
        starts = {getattr(graphs[bs], table).data_ptr() for bs in (1, 2, 4)}
        assert len(starts) == 1, table
        assert [getattr(graphs[bs], table).shape[0] for bs in (1, 2, 4)] == [next_n, 2 * next_n, 4 * next_n]


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


def test_read_done_is_published_after_the_replay(monkeypatch):
    """The graph reads the shared req_to_token pool while it rebuilds its metadata, so the event the
    scheduler's WAR barrier waits on is recorded after the replay, not before it."""
    runner, worker, _, fb, _ = _graph_and_eager(monkeypatch, 3, 3)
    assert runner.metadata_in_graph
    model_runner = worker.draft_runner
    model_runner.war_fastpath_read_done_event = None
    seen = []
    replay = runner.backend.replay

    def recording_replay(shape_key, forward_batch):
        seen.append(model_runner.war_fastpath_read_done_event)
        return replay(shape_key, forward_batch)

    monkeypatch.setattr(runner.backend, "replay", recording_replay)
    runner.execute(fb)
    assert seen == [None] and model_runner.war_fastpath_read_done_event is not None


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


# --------------------------------------------------------------------------
# The GPU test in sglang's tree, collected here
# --------------------------------------------------------------------------


def test_gpu_test_covers_each_next_n_and_decode_backend(gpu_test_classes):
    """Issue 47, Required 5: the test the patch adds to sglang's tree has one class per next_n 2-6 and DSA
    decode backend (FlashMLA sparse for a bf16 KV cache, FlashMLA KV for the FP8 one), each with the replay,
    host-lengths, eager-fallback and graph-count checks; without a GPU each test skips, saying why."""
    classes = gpu_test_classes
    wanted = {
        f"TestDSADraftExtendCudaGraph_n{n}_{backend}": None
        for n in (2, 3, 4, 5, 6)
        for backend in ("flashmla_sparse", "flashmla_kv")
    }
    assert set(wanted) <= set(classes), sorted(classes)
    checks = {
        "test_replay_matches_eager",
        "test_replay_needs_no_host_lengths",
        "test_batch_beyond_the_graphs_runs_eagerly",
        "test_one_graph_per_captured_batch_size",
    }
    for name in wanted:
        assert set(classes[name]) == checks, (name, classes[name])
    reasons = {reason for tests in classes.values() for reason in tests.values()}
    assert reasons == {"needs an SM90 or SM100 GPU with DeepGEMM"}, reasons
