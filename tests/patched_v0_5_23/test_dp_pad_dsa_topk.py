"""v0.5.23 line, patch 2: DP padding of an eager draft step pads the shared DSA top-k (CPU).

Upstream's #29787 carries the MTP IndexShare top-k on the draft input
(``EagleDraftInput.dsa_topk_indices``: the draft-extend seed at step 0, then the
top-k the steps share); draft step 0 reads it through
``IndexTopKShareState.from_mtp_carry``. Under DP attention an eager draft step is
padded by ``ForwardBatch._pad_inputs_to_size`` (called by
``prepare_mlp_sync_batch``) to the tokens the DP collectives need. Pristine 0.5.23
pads ``topk_p``, ``topk_index`` and ``hidden_states`` there but not
``dsa_topk_indices``, so step 0 hands the sparse attention fewer top-k rows than
tokens. These tests call sglang 0.5.23's own ``_pad_inputs_to_size`` and
``IndexTopKShareState`` and fail on pristine 0.5.23.

``_pad_inputs_to_size`` is called directly: 0.5.23's ``prepare_mlp_sync_batch``
chooses the padding from engine config published at start-up (parallel, spec and
exec namespaces), which these tests do not build; the token counts passed are
the ones it would pass (MAX_LEN padding to the largest rank, attention-TP
alignment, or an extend batch elsewhere keeping this rank's request count).
Stand-in: the attention backend's CUDA-graph seq-len fill value.
"""

from __future__ import annotations

from types import SimpleNamespace

import harness23
import torch

harness23.require()

from cpu_sglang import import_sglang  # noqa: E402

fbi = import_sglang("sglang.srt.model_executor.forward_batch_info")
eagle_info = import_sglang("sglang.srt.speculative.eagle_info")
index_topk_share = import_sglang("sglang.srt.layers.attention.index_topk_share")

INDEX_TOPK = 8
HIDDEN = 16
RUNNER = SimpleNamespace(attn_backend=SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1))


def _seed(bs):
    return torch.arange(41, 41 + bs, dtype=torch.int32)[:, None].repeat(1, INDEX_TOPK)


def _draft_step(bs, seed):
    rows = torch.arange(bs)
    spec_info = eagle_info.EagleDraftInput(
        topk_p=torch.ones(bs, 1),
        topk_index=rows[:, None],
        hidden_states=torch.randn(bs, HIDDEN),
        bonus_tokens=rows.to(torch.int32),
        dsa_topk_indices=seed,
    )
    spec_info.num_tokens_per_req = 1
    batch = fbi.ForwardBatch(
        forward_mode=fbi.ForwardMode.DECODE,
        batch_size=bs,
        input_ids=torch.zeros(bs, dtype=torch.int64),
        req_pool_indices=rows,
        seq_lens=torch.full((bs,), 10, dtype=torch.int64),
        out_cache_loc=torch.zeros(bs, dtype=torch.int64),
        seq_lens_sum=10 * bs,
        positions=torch.full((bs,), 10, dtype=torch.int64),
        spec_info=spec_info,
        lora_ids=[None] * bs,
    )
    batch.reuse_dsa_topk_indices = True
    return batch


def _step_0_top_k(batch):
    return index_topk_share.IndexTopKShareState.from_mtp_carry(batch).topk_indices


def test_padded_draft_step_reads_one_top_k_row_per_token():
    seed = _seed(2)
    batch = _draft_step(2, seed.clone())

    batch._pad_inputs_to_size(RUNNER, 4, 4)  # the other DP rank runs 4 requests

    shared = _step_0_top_k(batch)
    assert shared.shape == (4, INDEX_TOPK)
    assert shared.shape[0] == batch.positions.shape[0] == batch.spec_info.hidden_states.shape[0]
    assert torch.equal(shared[:2], seed)  # the requests' own rows, in order
    assert bool((shared[2:] == 0).all())  # padded tokens read KV slot 0, as the graph's padded rows


def test_rows_follow_tokens_when_the_request_count_is_kept():
    # prepare_mlp_sync_batch keeps bs and pads only the tokens when a decode
    # step runs beside an extend under MAX_LEN: the top-k is per token.
    seed = _seed(3)
    batch = _draft_step(3, seed.clone())

    batch._pad_inputs_to_size(RUNNER, 4, 3)

    assert batch.spec_info.topk_index.shape[0] == 3
    assert _step_0_top_k(batch).shape == (4, INDEX_TOPK)
    assert torch.equal(_step_0_top_k(batch)[:3], seed)


def test_a_step_without_a_seed_stays_without():
    batch = _draft_step(3, None)
    batch._pad_inputs_to_size(RUNNER, 4, 4)
    assert batch.spec_info.dsa_topk_indices is None  # step 0 computes its top-k
    assert batch.positions.shape[0] == 4
