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
from sglang.srt.speculative import eagle_draft_cuda_graph_runner as graph_mod
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
    worker._init_index_share_state()
    assert worker.index_share_for_mtp_iteration is share
    assert worker.dsa_topk_seed_enabled is seeded
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
    worker._init_index_share_state()
    accept_lens = [1, 4, 2, 3]  # ragged: 1..num_draft_tokens verified per req

    nxt = _run_draft_extend(worker, accept_lens)

    ndt = worker.speculative_num_draft_tokens
    # Stand-in indexer row t holds 1000 + t: the seed must hold the row of
    # each request's last verified token, i * ndt + accept_len - 1.
    expected_tokens = [i * ndt + a - 1 for i, a in enumerate(accept_lens)]
    assert nxt.dsa_topk_seed is not None
    assert nxt.dsa_topk_seed.dtype == torch.int32
    assert nxt.dsa_topk_seed.shape == (len(accept_lens), sup.INDEX_TOPK)
    assert nxt.dsa_topk_seed[:, 0].tolist() == [1000 + t for t in expected_tokens]
    assert decoder.indexer_calls == 1  # draft-extend's own indexer pass only


def test_draft_extend_without_flag_writes_no_seed():
    worker = sup.draft_worker(sup.StandInDraftRunner(sup.StandInDecoder(), index_share=False))
    worker._init_index_share_state()
    nxt = _run_draft_extend(worker, [2, 1])
    assert nxt.dsa_topk_seed is None


def test_capture_only_in_draft_extend_v2():
    """Prefill extend and decode never write a seed, even if rows are set."""
    decoder = sup.StandInDecoder()
    model = sup.nextn_model(decoder)
    for mode in ("EXTEND", "DECODE", "DRAFT_EXTEND_V2"):
        spec = EagleDraftExtendInput(
            hidden_states=torch.zeros(4, sup.HIDDEN),
            dsa_topk_seed_rows=torch.tensor([1, 3]),
        )
        fb = sup.forward_batch(mode, 2, 4, spec)
        model(fb.input_ids, fb.positions, fb)
        if mode == "DRAFT_EXTEND_V2":
            assert spec.dsa_topk_seed[:, 0].tolist() == [
                1000 * decoder.indexer_calls + 1,
                1000 * decoder.indexer_calls + 3,
            ]
        else:
            assert spec.dsa_topk_seed is None, mode


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
    worker._init_index_share_state()
    seed = sup.seed_rows(3)

    fb = _run_draft_loop(worker, 3, seed)

    assert decoder.indexer_calls == 0  # no indexer pass in the whole loop
    assert len(decoder.prev_seen) == worker.speculative_num_steps - 1
    for prev in decoder.prev_seen:  # every step, step 0 included, got the seed
        assert torch.equal(prev, seed)
    assert fb.topk_indices is None and fb.reuse_mtp_topk_indices is False


def test_draft_loop_computes_at_step_0_when_seed_absent():
    decoder = sup.StandInDecoder()
    worker = sup.draft_worker(sup.StandInDraftRunner(decoder), num_steps=4)
    worker._init_index_share_state()
    assert worker.dsa_topk_seed_enabled

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
    worker._init_index_share_state()

    _run_draft_loop(worker, 2, seed=sup.seed_rows(2))

    assert decoder.indexer_calls == 2  # every step runs its own indexer
    assert all(call["topk_indices"] is None for call in runner.calls)
    assert all(call["reuse"] is False for call in runner.calls)


# --------------------------------------------------------------------------
# Draft input filter / merge keep seed rows with their requests
# --------------------------------------------------------------------------


def _rows(inp):
    return inp.topk_index[:, 0].tolist(), inp.dsa_topk_seed[:, 0].tolist()


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
    assert inp.dsa_topk_seed is None


def test_merge_keeps_seed_rows_aligned():
    sup.ensure_global_server_args()
    a = sup.draft_input(2, seed=sup.seed_rows(2, base=10), base=0)
    b = sup.draft_input(3, seed=sup.seed_rows(3, base=20), base=2)
    a.merge_batch(b)
    assert _rows(a) == ([0, 1, 2, 3, 4], [11, 12, 21, 22, 23])

    # A side without a seed (e.g. just prefilled) contributes zero rows.
    a = sup.draft_input(2, seed=None, base=0)
    b = sup.draft_input(2, seed=sup.seed_rows(2, base=20), base=2)
    a.merge_batch(b)
    assert _rows(a) == ([0, 1, 2, 3], [0, 0, 21, 22])
    a = sup.draft_input(1, seed=sup.seed_rows(1, base=10), base=0)
    a.merge_batch(sup.draft_input(2, seed=None, base=1))
    assert _rows(a) == ([0, 1, 2], [11, 0, 0])

    # Neither side seeded: still absent (the draft loop computes at step 0).
    a = sup.draft_input(1, seed=None)
    a.merge_batch(sup.draft_input(1, seed=None, base=1))
    assert a.dsa_topk_seed is None


def test_merge_with_idle_and_overlap_placeholders():
    sup.ensure_global_server_args()
    idle = EagleDraftInput.create_idle_input(
        device="cpu",
        hidden_size=sup.HIDDEN,
        dtype=torch.float32,
        topk=1,
        capture_hidden_mode=None,
    )
    idle.merge_batch(sup.draft_input(2, seed=sup.seed_rows(2)))
    assert idle.dsa_topk_seed[:, 0].tolist() == [1, 2]

    # Overlap mode: rows live in FutureMap; merge keeps the "has a seed" mark
    # when either side has one and filter leaves it alone.
    a = sup.draft_input(1, seed=None, future_indices=torch.tensor([3]))
    b = sup.draft_input(1, seed=sup.seed_rows(1), future_indices=torch.tensor([5]))
    a.merge_batch(b)
    assert a.future_indices.tolist() == [3, 5]
    assert a.dsa_topk_seed is not None


# --------------------------------------------------------------------------
# Draft CUDA-graph runner: static seed buffer filled at replay
# --------------------------------------------------------------------------


def _graph_runner(max_bs, capture_bs, seeded=True):
    """An EAGLEDraftCudaGraphRunner without its capturing __init__; only the
    replay-side attributes ``execute`` reads are set."""
    runner = object.__new__(graph_mod.EAGLEDraftCudaGraphRunner)
    runner.deepep_adapter = SimpleNamespace(replay=lambda: None)
    runner.require_mlp_tp_gather = False
    runner.require_gathered_buffer = False
    runner.capture_bs = capture_bs
    runner.num_tokens_per_bs = 1
    runner.speculative_num_steps = 3
    runner.seq_len_fill_value = 1
    runner.model_runner = SimpleNamespace(
        model_config=SimpleNamespace(vocab_size=sup.VOCAB),
        server_args=SimpleNamespace(speculative_use_rejection_sampling=False),
        device_timer=None,
    )
    runner.draft_attn_backend = SimpleNamespace(init_forward_metadata_out_graph=lambda fb: None)
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
        dsa_topk_seed=(torch.full((max_bs, sup.INDEX_TOPK), -7, dtype=torch.int32) if seeded else None),
    )
    runner.replayed_seeds = []

    def replay(shape_key, forward_batch):
        """Stands for the CUDA graph replay: records what the captured graph
        would read from the static seed buffer."""
        runner.replayed_seeds.append(runner.buffers.dsa_topk_seed[: shape_key.size])
        bs = shape_key.size
        return (z(bs, 1), z(bs, 3), z(bs, 4), None)

    runner._replay_graph = replay
    return runner


def _replay(runner, bs, seed):
    spec = sup.draft_input(bs, seed=seed)
    fb = sup.forward_batch("DECODE", bs, bs * 3, spec)
    fb.positions = torch.zeros(bs, dtype=torch.int64)
    fb.seq_lens_cpu = torch.full((bs,), 10)
    runner.execute(fb)
    return runner.replayed_seeds[-1].clone()


def test_graph_replay_fills_seed_buffer():
    sup.ensure_global_server_args()
    runner = _graph_runner(max_bs=8, capture_bs=[1, 2, 4, 8])
    seen = _replay(runner, 3, sup.seed_rows(3))  # padded to the bs=4 graph
    assert seen[:, 0].tolist() == [1, 2, 3, 0]  # padded row reads zeros

    # A new seed on the same captured shape is what the next replay reads.
    seen = _replay(runner, 4, sup.seed_rows(4, base=40))
    assert seen[:, 0].tolist() == [41, 42, 43, 44]

    # Absent seed: zeros, never the previous batch's rows.
    seen = _replay(runner, 4, None)
    assert seen.eq(0).all()


def test_graph_capture_reads_static_seed_buffer(monkeypatch):
    """capture_one_shape hands draft_forward the static buffer as the seed."""
    sup.ensure_global_server_args()
    runner = _graph_runner(max_bs=4, capture_bs=[4])
    runner.topk = 1
    runner.dp_size = 1
    runner.require_attn_tp_gather = False
    runner.temperatures = torch.ones((4, 1))
    runner.extend_seq_lens_cpu = [1] * 4
    runner.model_runner.spec_algorithm = SimpleNamespace(is_standalone=lambda: False)
    runner.draft_attn_backend = SimpleNamespace(
        init_forward_metadata_in_graph=lambda fb: None,
        init_forward_metadata_out_graph=lambda fb, in_capture=False: None,
    )
    runner.deepep_adapter = SimpleNamespace(capture=lambda is_extend_in_batch: None)
    seen = {}

    def draft_forward(forward_batch):
        seen["seed"] = forward_batch.spec_info.dsa_topk_seed
        return None

    runner.eagle_worker = SimpleNamespace(draft_forward=draft_forward, speculative_num_steps=3)
    runner.backend = SimpleNamespace(capture_one=lambda key, run_once, dummies, post_warmup_hook: run_once())
    monkeypatch.setattr(graph_mod, "set_dp_buffer_len", lambda *a, **k: None)
    runner.capture_one_shape(4, forward=None)
    assert seen["seed"].data_ptr() == runner.buffers.dsa_topk_seed.data_ptr()
    assert seen["seed"].shape == (4, sup.INDEX_TOPK)
