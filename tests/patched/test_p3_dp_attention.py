"""Patch 3 under DP attention: the seed is padded with the batch, and the ranks agree (CPU).

The padding runs through sglang's own code: ``EagleDraftWorker.draft_forward``
runs each draft step through a draft runner that does what
``ModelRunner._forward_raw`` does around an eager forward under MLP sync,
``ForwardBatch.prepare_mlp_sync_batch`` (which calls ``_pad_inputs_to_size``)
before the real ``DeepseekModelNextN.forward`` and
``post_forward_mlp_sync_batch`` after it. This rank is DP rank 0 of 2 through
sglang's own parallel override; the other rank's token count is the
``global_num_tokens`` the MLP sync would have gathered.

Stand-ins beyond ``p34_support``'s: pinned host memory (``torch.tensor(...,
pin_memory=True)`` needs an accelerator; the copy it feeds is kept), and the
attention backend's CUDA-graph seq-len fill value.
"""

from __future__ import annotations

from types import SimpleNamespace

import cpu_sglang
import p34_support as sup
import pytest
import torch
from sglang.srt.layers import dp_attention
from sglang.srt.managers.scheduler_components import dp_attn
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel

_host_tensor = torch.tensor


def _unpinned_tensor(*args, pin_memory=False, **kwargs):
    return _host_tensor(*args, **kwargs)


class DpPaddingDraftRunner(sup.StandInDraftRunner):
    """The stand-in draft runner plus the MLP-sync padding of an eager forward."""

    mambaish_config = None
    is_draft_worker = True

    def __init__(self, decoder):
        super().__init__(decoder)
        self.attn_backend = SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1)
        self.padded_rows = []

    def forward(self, forward_batch):
        forward_batch.prepare_mlp_sync_batch(self)
        self.padded_rows.append(forward_batch.positions.shape[0])
        out = super().forward(forward_batch)
        forward_batch.post_forward_mlp_sync_batch(out.logits_output)
        return out


@pytest.fixture
def dp_rank_0_of_2(monkeypatch):
    monkeypatch.setattr(dp_attention, "_ATTN_DP_SIZE", 2)
    monkeypatch.setattr(torch, "tensor", _unpinned_tensor)
    with get_parallel().override(attn_dp_rank=0, attn_tp_size=1, attn_cp_size=1):
        yield


def _dp_draft_batch(worker, bs, seed, global_num_tokens):
    spec = sup.draft_input(bs, seed=seed)
    spec.num_tokens_per_req = 1
    fb = sup.forward_batch("DECODE", bs, bs * worker.speculative_num_steps, spec)
    fb.positions = torch.full((bs,), 10, dtype=torch.int64)
    fb.lora_ids = [None] * bs
    fb.global_num_tokens_cpu = list(global_num_tokens)
    fb.global_num_tokens_for_logprob_cpu = list(global_num_tokens)
    fb.global_num_tokens_gpu = torch.zeros(len(global_num_tokens), dtype=torch.int64)
    return fb


def _seeded_dp_loop(global_num_tokens, bs=2):
    decoder = sup.StandInDecoder()
    runner = DpPaddingDraftRunner(decoder)
    worker = sup.draft_worker(runner, num_steps=3)
    worker._init_dsa_index_share_state()
    seed = sup.seed_rows(bs, base=40)
    fb = _dp_draft_batch(worker, bs, seed, global_num_tokens)
    worker.draft_forward(fb)
    return decoder, runner, seed


@pytest.mark.usefixtures("dp_rank_0_of_2")
def test_eager_seeded_draft_loop_pads_the_seed_with_the_batch():
    # 2 requests here, 4 on the other rank: MAX_LEN padding to 4 tokens.
    decoder, runner, seed = _seeded_dp_loop([2, 4])

    assert runner.padded_rows == [4, 4]  # both draft steps ran padded
    assert decoder.indexer_calls == 0  # the seed served every step
    for prev in decoder.prev_seen:
        # one top-k row per token the step's attention runs, padding included
        assert prev.shape == (4, sup.INDEX_TOPK)
        assert torch.equal(prev[:2], seed)  # the requests' own rows, in order
        assert prev[2:].eq(0).all()  # padded tokens read KV slot 0


@pytest.mark.usefixtures("dp_rank_0_of_2")
def test_attention_tp_alignment_pads_the_seed_too():
    # 3 requests, attention TP 2: the step is padded to 4 tokens even without
    # another rank's larger batch.
    with get_parallel().override(attn_tp_size=2):
        decoder, runner, seed = _seeded_dp_loop([3, 1], bs=3)
    assert runner.padded_rows == [4, 4]
    assert all(prev.shape[0] == 4 and torch.equal(prev[:3], seed) for prev in decoder.prev_seen)


# --------------------------------------------------------------------------
# The MLP sync gathers whether every rank's draft input has a seed
# --------------------------------------------------------------------------


def _schedule_batch(mode, spec_info):
    return SimpleNamespace(forward_mode=mode, spec_info=spec_info)


def test_what_a_rank_contributes():
    sup.ensure_global_server_args()
    seeded = sup.draft_input(2, seed=sup.seed_rows(2))
    unseeded = sup.draft_input(2, seed=None)
    assert dp_attn._carries_dsa_topk_indices(None) is True  # no batch: nothing to draft
    assert dp_attn._carries_dsa_topk_indices(_schedule_batch(ForwardMode.IDLE, unseeded)) is True
    assert dp_attn._carries_dsa_topk_indices(_schedule_batch(ForwardMode.DECODE, seeded)) is True
    assert dp_attn._carries_dsa_topk_indices(_schedule_batch(ForwardMode.DECODE, unseeded)) is False
    # ranks that run no draft loop this iteration never hold the others back
    for mode in (ForwardMode.EXTEND, ForwardMode.PREBUILT):
        assert dp_attn._carries_dsa_topk_indices(_schedule_batch(mode, unseeded)) is True


@pytest.mark.parametrize("local", [True, False])
def test_the_gathered_flag_reaches_the_batch(local):
    cpu_sglang.init_single_rank_parallel()
    from sglang.srt.distributed.parallel_state import get_tp_group

    info = dp_attn.MLPSyncBatchInfo(
        dp_size=1,
        tp_size=1,
        cp_size=1,
        num_tokens=2,
        num_tokens_for_logprob=2,
        can_cuda_graph=True,
        is_extend_in_batch=False,
        local_can_run_tbo=False,
        local_forward_mode=ForwardMode.DECODE.value,
        can_run_breakable_cuda_graph=False,
        has_dsa_topk_indices=local,
    )
    info.all_gather(device="cpu", group=get_tp_group().cpu_group)
    assert info.has_dsa_topk_indices is local
    assert info.global_num_tokens == [2] and info.can_cuda_graph is True  # the other fields still line up

    batch = SimpleNamespace()
    dp_attn._update_gather_batch(batch, info, require_mlp_tp_gather=True)
    assert batch.dsa_topk_indices_on_all_dp_ranks is local
