"""Why the v0.5.14 line's patches 3-4 (MTP IndexShare seed, overlap relay) are not carried here.

Upstream merged the seed as #29787 (0.5.15). Our v0.5.14 patch 3 had to fix two things the first
upstream version lacked; at 0.5.23 upstream has both, in its own way:

- a seed taken from a prefill whose top-k came from the fused RAGGED transform (offsets into the
  batch's concatenated KV) must be turned into KV slots before a draft decode reads it:
  ``DeepseekSparseAttnBackend.prepare_mtp_seed_indices``, called by ``write_mtp_seed``;
- a draft loop without a seed must compute its step-0 top-k, never read a row nobody wrote:
  ``IndexTopKShareState.mtp_iteration`` keeps only a seed that exists (and ``EAGLEWorkerV2.draft``
  runs that loop eagerly when the seed is missing, which these tests do not reach).

These tests call that upstream code on the line's tree. They pass on pristine 0.5.23 as well; they
are here so that rebasing this line onto a release that loses either behaviour fails loudly, which
would make the v0.5.14 fix due again (docs/patches/v0.5.23/upstream-seed.md).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from sglang.srt.layers.attention import dsa_backend
from sglang.srt.layers.attention.dsa.dsa_topk_backend import TopkTransformMethod
from sglang.srt.layers.attention.index_topk_share import IndexTopKShareState
from sglang.srt.model_executor.forward_batch_info import ForwardMode


def _backend_with(transform: TopkTransformMethod, page_table_1, seq_lens, flattened=None):
    backend = object.__new__(dsa_backend.DeepseekSparseAttnBackend)
    backend.use_fused_topk = True
    backend.get_topk_transform_method = lambda forward_mode=None: transform
    backend.forward_metadata = SimpleNamespace(
        page_table_1=page_table_1,
        page_table_1_flattened=flattened,
        indexer_seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
    )
    return backend


def test_a_ragged_prefill_seed_becomes_kv_slots_and_keeps_its_padding():
    # Two requests of 3 and 2 tokens: the RAGGED top-k addresses their concatenated KV (0..4).
    page_table_1 = torch.tensor([[100, 101, 102], [200, 201, -7]], dtype=torch.int32)
    backend = _backend_with(TopkTransformMethod.RAGGED, page_table_1, seq_lens=[3, 2])
    ragged = torch.tensor([[2, 0, -1], [4, 3, -1]], dtype=torch.int32)

    seed = backend.prepare_mtp_seed_indices(ragged, ForwardMode.EXTEND)

    assert seed.tolist() == [[102, 100, -1], [201, 200, -1]]
    assert ragged.tolist() == [[2, 0, -1], [4, 3, -1]], "the prefill's own top-k must stay as it was"


def test_a_paged_prefill_seed_is_already_kv_slots():
    backend = _backend_with(TopkTransformMethod.PAGED, torch.zeros(1, 1, dtype=torch.int32), seq_lens=[1])
    paged = torch.tensor([[57, 12, -1]], dtype=torch.int32)

    assert backend.prepare_mtp_seed_indices(paged, ForwardMode.EXTEND) is paged


def _draft_batch(seed):
    return SimpleNamespace(
        spec_info=SimpleNamespace(dsa_topk_indices=seed),
        reuse_dsa_topk_indices=False,
        forward_mode=ForwardMode.DECODE,
    )


def test_a_draft_loop_without_a_seed_computes_its_first_top_k():
    batch = _draft_batch(seed=None)

    with IndexTopKShareState.mtp_iteration(batch, enabled=True, keep_carry_seed=True) as share:
        assert share.topk_indices is None  # nothing to reuse: step 0 runs the indexer
        assert batch.reuse_dsa_topk_indices  # later steps reuse what step 0 computes

    assert batch.spec_info.dsa_topk_indices is None and not batch.reuse_dsa_topk_indices


def test_a_draft_loop_with_a_seed_reuses_exactly_that_seed():
    seed = torch.tensor([[5, 9, 11]], dtype=torch.int32)
    batch = _draft_batch(seed=seed)

    with IndexTopKShareState.mtp_iteration(batch, enabled=True, keep_carry_seed=True) as share:
        assert share.topk_indices is seed

    assert batch.spec_info.dsa_topk_indices is None, "the seed must not leak into the next iteration"
