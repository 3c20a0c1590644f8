"""Eager draft decode under DP attention pads the shared DSA top-k with the step.

``ForwardBatch._pad_inputs_to_size`` pads a draft step to the token count its DP
collectives need (MAX_LEN padding, attention-TP alignment). The MTP IndexShare
top-k that draft step 0 reads (``EagleDraftInput.dsa_topk_indices``, the
draft-extend seed, through ``IndexTopKShareState``) holds one row per draft
token, like the hidden states, so it must be padded with them: left at the real
batch, step 0 hands the sparse attention fewer top-k rows than it has tokens.
"""

import unittest
from types import SimpleNamespace

import torch

from sglang.srt.layers.attention.index_topk_share import IndexTopKShareState
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

_INDEX_TOPK = 8
_HIDDEN = 16
_SEQ_LEN_FILL = 1
_MODEL_RUNNER = SimpleNamespace(
    attn_backend=SimpleNamespace(
        get_cuda_graph_seq_len_fill_value=lambda: _SEQ_LEN_FILL
    )
)


def _seed(bs):
    # row r holds r + 1 everywhere: never the padding value 0
    return torch.arange(1, bs + 1, dtype=torch.int32)[:, None].repeat(1, _INDEX_TOPK)


def _draft_step(bs, seed):
    rows = torch.arange(bs)
    spec_info = EagleDraftInput(
        topk_p=torch.ones(bs, 1),
        topk_index=rows[:, None],
        hidden_states=torch.randn(bs, _HIDDEN),
        bonus_tokens=rows.to(torch.int32),
        dsa_topk_indices=seed,
    )
    spec_info.num_tokens_per_req = 1
    batch = ForwardBatch(
        forward_mode=ForwardMode.DECODE,
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


class TestDraftDpPadDsaTopkIndices(unittest.TestCase):
    def test_step_0_reads_one_top_k_row_per_padded_token(self):
        seed = _seed(3)
        batch = _draft_step(3, seed.clone())

        batch._pad_inputs_to_size(_MODEL_RUNNER, 4, 4)

        shared = IndexTopKShareState.from_mtp_carry(batch).topk_indices
        self.assertEqual(tuple(shared.shape), (4, _INDEX_TOPK))
        self.assertEqual(shared.shape[0], batch.positions.shape[0])
        self.assertEqual(shared.shape[0], batch.spec_info.hidden_states.shape[0])
        self.assertTrue(torch.equal(shared[:3], seed))
        self.assertTrue(bool((shared[3:] == 0).all()))

    def test_rows_follow_tokens_when_the_request_count_is_kept(self):
        # A decode step beside an extend under MAX_LEN keeps its request count
        # and pads tokens only: the top-k is per token, like the hidden states.
        seed = _seed(3)
        batch = _draft_step(3, seed.clone())

        batch._pad_inputs_to_size(_MODEL_RUNNER, 4, 3)

        shared = IndexTopKShareState.from_mtp_carry(batch).topk_indices
        self.assertEqual(batch.spec_info.topk_index.shape[0], 3)
        self.assertEqual(tuple(shared.shape), (4, _INDEX_TOPK))
        self.assertTrue(torch.equal(shared[:3], seed))

    def test_a_step_without_a_seed_stays_without(self):
        batch = _draft_step(3, None)
        batch._pad_inputs_to_size(_MODEL_RUNNER, 4, 4)
        self.assertIsNone(batch.spec_info.dsa_topk_indices)
        self.assertEqual(batch.positions.shape[0], 4)


if __name__ == "__main__":
    unittest.main()
