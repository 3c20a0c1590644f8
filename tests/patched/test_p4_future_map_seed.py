"""Patch 4: the overlap scheduler's FutureMap relays the DSA top-k seed (CPU).

The real FutureMap runs on CPU tensors: its fused gather is a triton kernel
run by triton's interpreter (``p34_support`` sets ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

from types import SimpleNamespace

import p34_support as sup
import torch
from sglang.srt.managers.overlap_utils import FutureMap
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

POOL = 12


def _future_map():
    sup.ensure_global_server_args()
    return FutureMap(
        device=torch.device("cpu"),
        spec_algo=SpeculativeAlgorithm.from_string("EAGLE"),
        req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(POOL, 4)),
    )


def _stash(fmap, slots, seed, base):
    payload = sup.draft_input(len(slots), seed=seed, base=base)
    fmap.stash(torch.tensor(slots), payload)


def _resolve(fmap, slots, has_seed):
    """Resolve a batch as the next forward does; returns its draft input."""
    placeholder = sup.draft_input(
        len(slots),
        seed=sup.seed_rows(1) if has_seed else None,  # only marks "has a seed"
        future_indices=torch.tensor(slots),
    )
    fmap._resolve_spec_extras(SimpleNamespace(spec_info=placeholder))
    return placeholder


def test_stash_resolve_round_trip_interleaved():
    fmap = _future_map()
    seed_a = sup.seed_rows(3, base=100)  # rows 101, 102, 103
    seed_c = sup.seed_rows(2, base=300)  # rows 301, 302
    _stash(fmap, [3, 5, 1], seed_a, base=0)  # batch A, seeded
    _stash(fmap, [2, 7], None, base=10)  # batch B, prefilled (no seed)
    _stash(fmap, [4, 9], seed_c, base=20)  # batch C, seeded

    # Next forward: a merged and reordered batch of A's and C's requests.
    out = _resolve(fmap, [5, 9, 3, 4], has_seed=True)

    # The fields FutureMap already relayed line up with the requests ...
    assert out.topk_index[:, 0].tolist() == [1, 21, 0, 20]
    # ... and so do the seeds.
    assert out.dsa_topk_seed[:, 0].tolist() == [102, 302, 101, 301]
    assert out.dsa_topk_seed.dtype == torch.int32
    assert out.dsa_topk_seed.shape == (4, sup.INDEX_TOPK)
    assert torch.equal(out.dsa_topk_seed[2], seed_a[0])


def test_absent_seed_stays_absent():
    fmap = _future_map()
    _stash(fmap, [1, 2], sup.seed_rows(2), base=0)
    _stash(fmap, [6], None, base=5)

    out = _resolve(fmap, [6], has_seed=False)
    assert out.dsa_topk_seed is None
    assert out.topk_index[:, 0].tolist() == [5]

    # Before any seeded stash there is no seed buffer and nothing to resolve.
    fresh = _future_map()
    _stash(fresh, [0, 1], None, base=0)
    assert fresh.dsa_topk_seed_buf is None
    assert _resolve(fresh, [1, 0], has_seed=False).dsa_topk_seed is None


def test_overlap_merge_with_an_unseeded_stash_relays_no_seed():
    """A running, seeded batch merged with a just-prefilled one whose stash had
    no seed: the merged draft input has no seed after resolve, so its loop
    computes the top-k; no zero or stale row is relayed as indices."""
    fmap = _future_map()
    _stash(fmap, [0, 1], sup.seed_rows(2, base=10), base=0)  # running, seeded
    _stash(fmap, [4], sup.seed_rows(1, base=40), base=40)  # slot 4's previous owner
    _stash(fmap, [4], None, base=7)  # new request in slot 4, prefilled without seed

    running = sup.draft_input(2, seed=sup.seed_rows(2, base=10), future_indices=torch.tensor([0, 1]))
    running.merge_batch(sup.draft_input(1, seed=None, future_indices=torch.tensor([4])))
    fmap._resolve_spec_extras(SimpleNamespace(spec_info=running))

    assert running.topk_index[:, 0].tolist() == [0, 1, 7]
    assert running.dsa_topk_seed is None


def test_overlap_filter_merge_then_resolve():
    """Overlap mode: filter/merge only move future_indices; the seed rows that
    reach the draft loop belong to the surviving requests."""
    fmap = _future_map()
    _stash(fmap, [0, 1, 2], sup.seed_rows(3, base=10), base=0)
    _stash(fmap, [5, 6], sup.seed_rows(2, base=50), base=50)

    running = sup.draft_input(3, seed=sup.seed_rows(3), future_indices=torch.tensor([0, 1, 2]))
    running.filter_batch(torch.tensor([0, 2]))  # request in slot 1 finished
    running.merge_batch(sup.draft_input(2, seed=sup.seed_rows(2), future_indices=torch.tensor([5, 6])))
    fmap._resolve_spec_extras(SimpleNamespace(spec_info=running))

    assert running.topk_index[:, 0].tolist() == [0, 2, 50, 51]
    assert running.dsa_topk_seed[:, 0].tolist() == [11, 13, 51, 52]
