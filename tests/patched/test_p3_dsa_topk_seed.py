"""Patch 3: seed the shared DSA indexer top-k from draft-extend (CPU checks).

Drives the patched worker, draft model and draft input with CPU tensors; only
the decoder layer (indexer), the model runner and the CUDA graph replay are
stand-ins (see ``p34_support``).
"""

from __future__ import annotations

from types import SimpleNamespace

import p34_support as sup
import pytest
import torch
from cpu_sglang import import_sglang
from sglang.srt.layers.attention.dsa.dsa_topk_backend import TopkTransformMethod
from sglang.srt.model_executor import forward_context as fctx
from sglang.srt.models import deepseek_nextn as nextn_mod
from sglang.srt.speculative import eagle_draft_cuda_graph_runner as graph_mod
from sglang.srt.speculative import eagle_worker_v2 as worker_mod
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput

# --------------------------------------------------------------------------
# Gating: worker state read once from the draft hf_config
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index_share, index_topk, topk, share, seeded",
    [
        (True, True, 1, True, True),
        (False, True, 1, False, False),  # flag off
        (True, True, 2, False, False),  # tree drafting (topk > 1)
        (True, False, 1, True, False),  # no index_topk in the config
    ],
)
def test_worker_state_from_hf_config(index_share, index_topk, topk, share, seeded):
    runner = sup.StandInDraftRunner(sup.StandInDecoder(), index_share=index_share, index_topk=index_topk)
    worker = sup.draft_worker(runner, topk=topk)
    worker._init_dsa_index_share_state()
    assert worker.index_share_for_mtp_iteration is share
    assert worker.seed_dsa_topk_from_draft_extend is seeded
    assert worker.dsa_index_topk == (sup.INDEX_TOPK if index_topk else None)


# --------------------------------------------------------------------------
# Capture during draft-extend
# --------------------------------------------------------------------------


def _run_draft_extend(worker, accept_lens):
    """Run the real _draft_extend_for_decode for len(accept_lens) requests."""
    ndt = worker.speculative_num_draft_tokens
    bs = len(accept_lens)

    def prepare_for_draft_extend(draft_extend_input, batch, predict, *args):
        """Stands for the base prepare step, which builds the ForwardBatch from
        a ScheduleBatch and the KV pools; here the tokens are laid out the same
        way: num_draft_tokens rows per request."""
        fb = sup.forward_batch("DRAFT_EXTEND_V2", bs, bs * ndt, draft_extend_input)
        fb.input_ids = predict % sup.VOCAB
        return fb

    worker.prepare_for_draft_extend = prepare_for_draft_extend
    batch_result = SimpleNamespace(
        logits_output=SimpleNamespace(hidden_states=torch.randn(bs * ndt, sup.HIDDEN)),
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
        next_token_ids=torch.arange(bs * ndt),
        next_draft_input=EagleDraftInput(bonus_tokens=torch.zeros(bs, dtype=torch.int32)),
    )
    batch = SimpleNamespace(seq_lens=torch.full((bs,), 10), sampling_info=None, forward_mode=None)
    worker._draft_extend_for_decode(batch, batch_result)
    return batch_result.next_draft_input


def test_draft_extend_captures_last_verified_row_ragged():
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder), num_steps=3)
    worker._init_dsa_index_share_state()
    accept_lens = [1, 4, 2, 3]  # ragged: 1..num_draft_tokens verified per req

    nxt = _run_draft_extend(worker, accept_lens)

    ndt = worker.speculative_num_draft_tokens
    # Stand-in indexer row t holds 1000 + t: the seed must hold the row of
    # each request's last verified token, i * ndt + accept_len - 1.
    expected_tokens = [i * ndt + a - 1 for i, a in enumerate(accept_lens)]
    assert nxt.dsa_topk_indices is not None
    assert nxt.dsa_topk_indices.dtype == torch.int32
    assert nxt.dsa_topk_indices.shape == (len(accept_lens), sup.INDEX_TOPK)
    assert nxt.dsa_topk_indices[:, 0].tolist() == [1000 + t for t in expected_tokens]
    assert decoder.indexer_calls == 1  # draft-extend's own indexer pass only


def test_draft_extend_without_flag_writes_no_seed():
    worker = sup.draft_worker(sup.StandInDraftRunner(sup.StandInDecoder(), index_share=False))
    worker._init_dsa_index_share_state()
    nxt = _run_draft_extend(worker, [2, 1])
    assert nxt.dsa_topk_indices is None


def test_capture_happens_where_the_worker_asks():
    """The model keeps exactly the rows the worker named, in any extend mode,
    and nothing when no rows were named."""
    decoder = sup.StandInDecoder()
    model = sup.nextn_model(decoder)
    for mode in ("EXTEND", "DRAFT_EXTEND_V2"):
        for rows in (torch.tensor([1, 3]), None):
            spec = EagleDraftExtendInput(hidden_states=torch.zeros(4, sup.HIDDEN), dsa_seed_topk_select=rows)
            fb = sup.forward_batch(mode, 2, 4, spec)
            with fctx.forward_context(fctx.ForwardContext(attn_backend=TransformBackend(TopkTransformMethod.PAGED))):
                model(fb.input_ids, fb.positions, fb)
            if rows is None:
                assert spec.dsa_seed_topk_capture is None, mode
            else:
                call = 1000 * decoder.indexer_calls
                assert spec.dsa_seed_topk_capture[:, 0].tolist() == [call + 1, call + 3], mode


@pytest.mark.parametrize(
    "mode, hisparse, enabled, wanted",
    [
        ("DRAFT_EXTEND_V2", None, True, True),
        ("EXTEND", None, True, True),  # prefill: the model decides on the transform
        ("DRAFT_EXTEND_V2", object(), True, False),  # HiSparse
        ("IDLE", None, True, False),
        ("DRAFT_EXTEND_V2", None, False, False),  # flag off
    ],
)
def test_worker_asks_for_a_seed(mode, hisparse, enabled, wanted):
    runner = sup.StandInDraftRunner(sup.StandInDecoder(), index_share=enabled)
    runner.attn_backend = SimpleNamespace(hisparse_coordinator=hisparse)
    worker = sup.draft_worker(runner)
    worker._init_dsa_index_share_state()
    fb = sup.forward_batch(mode, 2, 4, EagleDraftExtendInput(hidden_states=torch.zeros(4, sup.HIDDEN)))
    fb.extend_seq_lens = torch.tensor([3, 1])
    assert worker._wants_dsa_seed_topk(fb) is wanted


class TransformBackend:
    """Stands for the DSA attention backend: answers the top-k transform it
    would use for this batch (decided per batch, from its prefill impl)."""

    def __init__(self, method):
        self.method = method
        self.asked = []

    def get_topk_transform_method(self, forward_mode):
        self.asked.append(forward_mode)
        return self.method


def _model_capture(mode, method, prefill_cp=False):
    decoder = sup.StandInDecoder()
    model = sup.nextn_model(decoder)
    model.dsa_enable_prefill_cp = prefill_cp
    spec = EagleDraftExtendInput(hidden_states=torch.zeros(4, sup.HIDDEN), dsa_seed_topk_select=torch.tensor([1, 3]))
    fb = sup.forward_batch(mode, 2, 4, spec)
    backend = TransformBackend(method)
    with fctx.forward_context(fctx.ForwardContext(attn_backend=backend)):
        model(fb.input_ids, fb.positions, fb)
    return spec.dsa_seed_topk_capture, backend


@pytest.mark.parametrize(
    "mode, method, fused, kept",
    [
        ("DRAFT_EXTEND_V2", TopkTransformMethod.PAGED, True, True),
        ("DRAFT_EXTEND_V2", TopkTransformMethod.PAGED, False, True),  # same transform as decode
        ("EXTEND", TopkTransformMethod.PAGED, True, True),  # prefill, KV-pool slots
        ("EXTEND", TopkTransformMethod.RAGGED, True, False),  # ragged offsets
        ("EXTEND", TopkTransformMethod.PAGED, False, False),  # unfused prefill top-k
    ],
)
def test_model_keeps_only_a_top_k_draft_decode_can_read(monkeypatch, mode, method, fused, kept):
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "1" if fused else "0")
    seed, backend = _model_capture(mode, method)
    assert (seed is not None) is kept
    if mode == "EXTEND" and fused:
        # asked while the forward runs, i.e. after this batch's metadata was built
        assert backend.asked == [sup_fbi().ForwardMode.EXTEND]


def test_context_parallel_prefill_does_not_seed(monkeypatch):
    # each rank holds a share of the tokens; the worker's rows index the whole batch
    monkeypatch.setattr(nextn_mod, "dsa_use_prefill_cp", lambda fb, enabled=False: enabled)
    monkeypatch.setattr(nextn_mod, "cp_split_and_rebuild_data", lambda fb, h: h)
    monkeypatch.setattr(nextn_mod, "cp_split_and_rebuild_position", lambda fb, p: p)
    monkeypatch.setattr(nextn_mod, "cp_all_gather_rerange_output", lambda h, *a: h)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)  # the gather's stream argument
    seed, _ = _model_capture("EXTEND", TopkTransformMethod.PAGED, prefill_cp=True)
    assert seed is None
    seed, _ = _model_capture("EXTEND", TopkTransformMethod.PAGED, prefill_cp=False)
    assert seed is not None


def test_npu_never_seeds(monkeypatch):
    # NPU's draft-extend always replays a graph that keeps no top-k.
    monkeypatch.setattr(worker_mod, "_is_npu", True)
    worker = sup.draft_worker(sup.StandInDraftRunner(sup.StandInDecoder()))
    worker._init_dsa_index_share_state()
    assert worker.index_share_for_mtp_iteration is True
    assert worker.seed_dsa_topk_from_draft_extend is False


def _run_prefill_draft_extend(monkeypatch, worker, extend_lens, method, mode="EXTEND"):
    """Run the real _draft_extend_for_prefill for requests of extend_lens tokens."""
    bs, num_tokens = len(extend_lens), sum(extend_lens)
    built = {}

    def init_new(batch, runner):
        """Stands for ForwardBatch.init_new (ScheduleBatch + KV pools -> ForwardBatch)."""
        fb = sup.forward_batch(mode, bs, num_tokens, batch.spec_info)
        fb.input_ids = batch.input_ids % sup.VOCAB
        fb.extend_seq_lens = torch.tensor(extend_lens, dtype=torch.int32)
        built["fb"] = fb
        return fb

    monkeypatch.setattr(worker_mod.ForwardBatch, "init_new", staticmethod(init_new))
    worker.speculative_algorithm = SimpleNamespace(is_standalone=lambda: False)
    batch = SimpleNamespace(
        forward_mode=getattr(sup_fbi().ForwardMode, mode),
        input_ids=torch.arange(num_tokens) % sup.VOCAB,
        extend_lens=list(extend_lens),
        chunked_req_next_prompt_token=None,
        reqs=[object() for _ in extend_lens],
        chunked_req=None,
        sampling_info=None,
    )
    with fctx.forward_context(fctx.ForwardContext(attn_backend=TransformBackend(method))):
        out = worker._draft_extend_for_prefill(batch, torch.randn(num_tokens, sup.HIDDEN), torch.arange(bs))
    return out, built["fb"]


def sup_fbi():
    return import_sglang("sglang.srt.model_executor.forward_batch_info")


def test_prefill_seeds_first_draft_loop_with_last_prompt_token(monkeypatch):
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder))
    worker._init_dsa_index_share_state()
    extend_lens = [5, 1, 3]

    out, _ = _run_prefill_draft_extend(monkeypatch, worker, extend_lens, TopkTransformMethod.PAGED)

    last_tokens = [4, 5, 8]  # cumulative extend lengths - 1
    assert out.dsa_topk_indices is not None and out.dsa_topk_indices.dtype == torch.int32
    assert out.dsa_topk_indices[:, 0].tolist() == [1000 + t for t in last_tokens]


def test_ragged_prefill_leaves_the_first_loop_to_compute(monkeypatch):
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder), num_steps=3)
    worker._init_dsa_index_share_state()

    out, _ = _run_prefill_draft_extend(monkeypatch, worker, [4, 2], TopkTransformMethod.RAGGED)
    assert out.dsa_topk_indices is None

    # that draft input's first loop runs the indexer at step 0
    calls_before = decoder.indexer_calls
    _run_draft_loop(worker, 2, out.dsa_topk_indices)
    assert decoder.indexer_calls == calls_before + 1
    assert decoder.prev_seen[-2] is None


# --------------------------------------------------------------------------
# Draft loop: reuse from step 0, fallback when absent
# --------------------------------------------------------------------------


def _run_draft_loop(worker, bs, seed):
    spec = sup.draft_input(bs, seed=seed)
    steps = worker.speculative_num_steps
    fb = sup.forward_batch("DECODE", bs, bs * steps, spec)
    fb.positions = torch.full((bs,), 10, dtype=torch.int64)
    worker.draft_forward(fb)
    return fb


def test_draft_loop_reuses_seed_from_step_0():
    decoder = sup.StandInDecoder()
    runner = sup.StandInDraftRunner(decoder)
    worker = sup.draft_worker(runner, num_steps=3)
    worker._init_dsa_index_share_state()
    seed = sup.seed_rows(3)

    fb = _run_draft_loop(worker, 3, seed)

    assert decoder.indexer_calls == 0  # no indexer pass in the whole loop
    assert len(decoder.prev_seen) == worker.speculative_num_steps - 1
    for prev in decoder.prev_seen:  # every step, step 0 included, got the seed
        assert torch.equal(prev, seed)
    assert fb.spec_info.dsa_topk_indices is None and fb.reuse_dsa_topk_indices is False


def test_draft_loop_computes_at_step_0_when_seed_absent():
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder), num_steps=4)
    worker._init_dsa_index_share_state()
    assert worker.seed_dsa_topk_from_draft_extend

    _run_draft_loop(worker, 2, seed=None)

    assert decoder.indexer_calls == 1
    assert decoder.prev_seen[0] is None  # step 0 computes
    computed = decoder.prev_seen[1]
    assert computed is not None and computed[0, 0].item() == 1000
    for prev in decoder.prev_seen[1:]:  # later steps share step 0's result
        assert torch.equal(prev, computed)


def test_draft_loop_ignores_seed_without_flag():
    """A model without index_share_for_mtp_iteration runs as before."""
    decoder = sup.StandInDecoder()
    runner = sup.StandInDraftRunner(decoder, index_share=False)
    worker = sup.draft_worker(runner, num_steps=3)
    worker._init_dsa_index_share_state()

    _run_draft_loop(worker, 2, seed=sup.seed_rows(2))

    assert decoder.indexer_calls == 2  # every step runs its own indexer
    assert all(prev is None for prev in decoder.prev_seen)  # nothing handed to it
    assert all(call["reuse"] is False for call in runner.calls)


# --------------------------------------------------------------------------
# Draft input filter / merge keep seed rows with their requests
# --------------------------------------------------------------------------


def _rows(inp):
    return inp.topk_index[:, 0].tolist(), inp.dsa_topk_indices[:, 0].tolist()


def test_filter_keeps_seed_rows_aligned():
    sup.ensure_global_server_args()
    # Scheduler filter (not pre-filtered by verify): requests 0 and 2 finish.
    inp = sup.draft_input(5, seed=sup.seed_rows(5))
    inp.filter_batch(torch.tensor([1, 3, 4]), has_been_filtered=False)
    tokens, seeds = _rows(inp)
    assert tokens == [1, 3, 4] and seeds == [2, 4, 5]

    # No seed stays no seed.
    inp = sup.draft_input(3, seed=None)
    inp.filter_batch(torch.tensor([2]), has_been_filtered=False)
    assert inp.dsa_topk_indices is None


def test_merge_keeps_seed_rows_aligned():
    sup.ensure_global_server_args()
    a = sup.draft_input(2, seed=sup.seed_rows(2, base=10), base=0)
    b = sup.draft_input(3, seed=sup.seed_rows(3, base=20), base=2)
    a.merge_batch(b)
    assert _rows(a) == ([0, 1, 2, 3, 4], [11, 12, 21, 22, 23])


@pytest.mark.parametrize("seeded_side", ["running", "joining"])
def test_merge_with_an_unseeded_side_has_no_seed(seeded_side):
    # One draft loop serves the merged batch: a request without a seed (e.g.
    # just prefilled) makes it compute, never read rows nobody computed.
    sup.ensure_global_server_args()
    running_seed = sup.seed_rows(2, base=10) if seeded_side == "running" else None
    joining_seed = sup.seed_rows(2, base=20) if seeded_side == "joining" else None
    a = sup.draft_input(2, seed=running_seed, base=0)
    a.merge_batch(sup.draft_input(2, seed=joining_seed, base=2))
    assert a.topk_index[:, 0].tolist() == [0, 1, 2, 3]
    assert a.dsa_topk_indices is None

    a = sup.draft_input(1, seed=None)
    a.merge_batch(sup.draft_input(1, seed=None, base=1))
    assert a.dsa_topk_indices is None


def test_joining_request_gets_its_step_0_top_k_from_the_indexer():
    """A running, seeded batch merged with a just-prefilled batch without a
    seed: the draft loop's step 0 runs the indexer, so the new request's top-k
    (and everyone's) is computed, not a row of zeros or another request's."""
    sup.ensure_global_server_args()
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder), num_steps=3)
    worker._init_dsa_index_share_state()
    running = sup.draft_input(2, seed=sup.seed_rows(2, base=10), base=0)
    running.merge_batch(sup.draft_input(1, seed=None, base=2))

    steps = worker.speculative_num_steps
    fb = sup.forward_batch("DECODE", 3, 3 * steps, running)
    fb.positions = torch.full((3,), 10, dtype=torch.int64)
    worker.draft_forward(fb)

    assert decoder.indexer_calls == 1
    assert decoder.prev_seen[0] is None  # step 0 computed
    computed = decoder.prev_seen[1]
    assert computed[2, 0].item() == 1000 + 2  # the joining request's own indexer row
    assert bool((computed != 0).all())


def test_idle_merge_takes_the_other_side():
    sup.ensure_global_server_args()
    idle = EagleDraftInput.create_idle_input(
        device="cpu",
        hidden_size=sup.HIDDEN,
        dtype=torch.float32,
        topk=1,
        capture_hidden_mode=None,
    )
    idle.merge_batch(sup.draft_input(2, seed=sup.seed_rows(2)))
    assert idle.dsa_topk_indices[:, 0].tolist() == [1, 2]


def _overlap_round(running, joining):
    """Overlap mode: filter then merge move only future_indices; FutureMap
    (as far as this prefix of the series relays anything) fills the rest."""
    running.filter_batch(torch.tensor([0, 2]))
    running.merge_batch(joining)
    return running


def test_overlap_filter_merge_never_hand_stale_rows_to_the_loop():
    # Whatever the overlap relay does, the seed that reaches the draft loop
    # after filter/merge is absent or exactly the surviving requests' rows.
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sup.ensure_global_server_args()
    fmap = FutureMap(
        device=torch.device("cpu"),
        spec_algo=SpeculativeAlgorithm.from_string("EAGLE"),
        req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(12, 4)),
    )
    fmap.stash(torch.tensor([0, 1, 2]), sup.draft_input(3, seed=sup.seed_rows(3, base=10), base=0))
    fmap.stash(torch.tensor([5]), sup.draft_input(1, seed=sup.seed_rows(1, base=50), base=50))
    running = sup.draft_input(3, seed=sup.seed_rows(3, base=10), future_indices=torch.tensor([0, 1, 2]))
    joining = sup.draft_input(1, seed=sup.seed_rows(1, base=50), future_indices=torch.tensor([5]))
    merged = _overlap_round(running, joining)
    fmap._resolve_spec_extras(SimpleNamespace(spec_info=merged))
    assert merged.topk_index[:, 0].tolist() == [0, 2, 50]
    assert merged.dsa_topk_indices is None or merged.dsa_topk_indices[:, 0].tolist() == [11, 13, 51]


# --------------------------------------------------------------------------
# Draft CUDA-graph runner: one draft loop per batch size, reading the seed;
# a batch without a seed runs the draft loop eagerly
# --------------------------------------------------------------------------


def _graph_runner(max_bs, capture_bs, seeded=True, mlp_sync=False):
    """An EAGLEDraftCudaGraphRunner without its capturing __init__; only the
    attributes ``capture_one_shape``, ``can_run_graph`` and ``execute`` read
    are set. The graph backend is a stand-in that keeps each captured callable
    and "replays" a graph by calling it again (CUDA graphs need a GPU)."""
    runner = object.__new__(graph_mod.EAGLEDraftCudaGraphRunner)
    runner.deepep_adapter = SimpleNamespace(replay=lambda: None, capture=lambda is_extend_in_batch: None)
    runner.require_mlp_tp_gather = False
    runner.require_gathered_buffer = False
    runner.require_attn_tp_gather = False
    runner.require_mlp_sync = mlp_sync
    runner.disable_padding = False
    runner.max_bs = max_bs
    runner.capture_bs = capture_bs
    runner.num_tokens_per_bs = 1
    runner.speculative_num_steps = 3
    runner.seq_len_fill_value = 1
    runner.topk = 1
    runner.dp_size = 1
    runner.temperatures = torch.ones((max_bs, 1))
    runner.extend_seq_lens_cpu = [1] * max_bs
    runner.model_runner = SimpleNamespace(
        model_config=SimpleNamespace(vocab_size=sup.VOCAB),
        server_args=SimpleNamespace(speculative_use_rejection_sampling=False),
        device_timer=None,
        spec_algorithm=SimpleNamespace(is_standalone=lambda: False),
    )
    runner.draft_attn_backend = SimpleNamespace(
        init_forward_metadata_in_graph=lambda fb: None,
        init_forward_metadata_out_graph=lambda fb, in_capture=False: None,
    )
    z = torch.zeros
    runner.buffers = graph_mod.EagleDraftInputBuffers(
        input_ids=z(max_bs, dtype=torch.int64),
        req_pool_indices=z(max_bs, dtype=torch.int64),
        out_cache_loc=z(max_bs * 3, dtype=torch.int64),
        positions=z(max_bs, dtype=torch.int64),
        mrope_positions=z((3, max_bs), dtype=torch.int64),
        rids_int=None,
        bootstrap_room_ids_int=None,
        seq_lens=z(max_bs, dtype=torch.int64),
        seq_lens_cpu=z(max_bs, dtype=torch.int64),
        extend_seq_lens=z(max_bs, dtype=torch.int32),
        topk_p=z((max_bs, 1)),
        topk_index=z((max_bs, 1), dtype=torch.int64),
        draft_probs=None,
        hidden_states=z((max_bs, sup.HIDDEN)),
        global_num_tokens_gpu=None,
        global_num_tokens_for_logprob_gpu=None,
        dsa_seed_topk=(torch.full((max_bs, sup.INDEX_TOPK), -7, dtype=torch.int32) if seeded else None),
    )
    graphs = {}
    runner.replayed = []

    def capture_one(shape_key, run_once, dummies, post_warmup_hook):
        assert shape_key not in graphs, f"{shape_key} captured twice"
        graphs[shape_key] = run_once
        run_once()

    def replay(shape_key, forward_batch):
        runner.replayed.append(shape_key)
        return graphs[shape_key]()

    runner.backend = SimpleNamespace(capture_one=capture_one)
    runner._replay_graph = replay
    runner.graphs = graphs
    return runner


def _capture(monkeypatch, runner, worker, sizes):
    monkeypatch.setattr(graph_mod, "set_dp_buffer_len", lambda *a, **k: None)
    runner.eagle_worker = worker
    for size in sizes:
        runner.capture_one_shape(size, forward=None)


def _decode_batch(bs, seed):
    fb = sup.forward_batch("DECODE", bs, bs * 3, sup.draft_input(bs, seed=seed))
    fb.positions = torch.zeros(bs, dtype=torch.int64)
    fb.seq_lens_cpu = torch.full((bs,), 10)
    fb.can_run_dp_cuda_graph = True
    return fb


def _graph_worker(num_steps=3, index_share=True):
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder, index_share=index_share), num_steps=num_steps)
    worker._init_dsa_index_share_state()
    return worker, decoder


def _captured_bs4_runner(monkeypatch, mlp_sync=False):
    """A runner with the bs=4 draft loop captured; the decoder's record starts empty."""
    sup.ensure_global_server_args()
    worker, decoder = _graph_worker()
    runner = _graph_runner(max_bs=4, capture_bs=[4], mlp_sync=mlp_sync)
    _capture(monkeypatch, runner, worker, [4])
    decoder.prev_seen.clear()
    return runner, decoder, worker


def test_one_draft_loop_captured_per_batch_size_reading_the_seed(monkeypatch):
    sup.ensure_global_server_args()
    worker, decoder = _graph_worker()
    runner = _graph_runner(max_bs=4, capture_bs=[2, 4])
    _capture(monkeypatch, runner, worker, [4, 2])
    assert sorted((k.size, k.variant_label) for k in runner.graphs) == [(2, None), (4, None)]
    # each captured loop reads the static seed buffer from step 0 on: no indexer pass
    assert decoder.indexer_calls == 0
    assert len(decoder.prev_seen) == 2 * (worker.speculative_num_steps - 1)
    assert all(bool((p == -7).all()) for p in decoder.prev_seen)


def test_unseeded_batch_is_not_replayed_and_its_eager_loop_computes(monkeypatch):
    runner, decoder, worker = _captured_bs4_runner(monkeypatch)
    fb = _decode_batch(3, seed=None)

    assert runner.can_run_graph(fb) is False  # never a graph reading a row nobody wrote

    calls = decoder.indexer_calls
    fb.positions = torch.full((3,), 10, dtype=torch.int64)
    worker.draft_forward(fb)  # what EagleDraftWorker.draft runs when the graph cannot
    assert runner.replayed == []
    assert decoder.indexer_calls == calls + 1
    assert decoder.prev_seen[0] is None  # step 0 computed ...
    assert decoder.prev_seen[1][:, 0].tolist() == [1000 * decoder.indexer_calls + t for t in range(3)]


def test_seeded_batch_replays_the_graph_with_its_seed(monkeypatch):
    runner, decoder, _ = _captured_bs4_runner(monkeypatch)
    calls = decoder.indexer_calls
    fb = _decode_batch(3, seed=sup.seed_rows(3, base=40))

    assert runner.can_run_graph(fb) is True
    runner.execute(fb)  # padded to the bs=4 graph

    assert len(runner.replayed) == 1
    assert decoder.indexer_calls == calls  # no indexer pass in the loop
    assert decoder.prev_seen[0][:3, 0].tolist() == [41, 42, 43]
    assert decoder.prev_seen[0][3].eq(0).all()  # the padded row reads KV slot 0
    # the next replay reads the next batch's seed from the same buffer
    runner.execute(_decode_batch(4, seed=sup.seed_rows(4, base=60)))
    assert decoder.prev_seen[-1][:, 0].tolist() == [61, 62, 63, 64]


@pytest.mark.parametrize("local_seed, all_ranks, replays", [(True, True, True), (True, False, False)])
def test_under_mlp_sync_the_ranks_gathered_answer_decides(monkeypatch, local_seed, all_ranks, replays):
    # A rank whose own batch is seeded still runs eagerly when another DP rank's
    # is not: graph and eager draft loops on different ranks would pair
    # different collectives.
    runner, _, _ = _captured_bs4_runner(monkeypatch, mlp_sync=True)
    fb = _decode_batch(2, seed=sup.seed_rows(2) if local_seed else None)
    fb.dsa_topk_indices_on_all_dp_ranks = all_ranks
    assert runner.can_run_graph(fb) is replays


def test_graph_keys_and_replay_unchanged_without_seeding(monkeypatch):
    sup.ensure_global_server_args()
    worker, decoder = _graph_worker(index_share=False)
    runner = _graph_runner(max_bs=2, capture_bs=[2], seeded=False)
    _capture(monkeypatch, runner, worker, [2])
    assert [(k.size, k.variant_label) for k in runner.graphs] == [(2, None)]
    fb = _decode_batch(2, seed=None)
    assert runner.can_run_graph(fb) is True
    runner.execute(fb)
    assert len(runner.replayed) == 1
