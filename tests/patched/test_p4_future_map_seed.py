"""Patch 4: the overlap scheduler's FutureMap relays the DSA top-k seed (CPU).

The real FutureMap runs on CPU tensors: its fused gather is a triton kernel
run by triton's interpreter (``p34_support`` sets ``TRITON_INTERPRET=1``).
Whether a batch has a seed is the explicit host flag
``EagleDraftInput.future_dsa_topk_indices_available``, never a tensor left on
the draft input.
"""

from __future__ import annotations

from types import SimpleNamespace

import p34_support as sup
import pytest
import torch
from sglang.srt.speculative import eagle_worker_v2 as worker_mod
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

POOL = 12
STALE = sup.seed_rows(6, base=900)  # rows a draft input may still hold from before filter/merge


def _future_map(width=sup.INDEX_TOPK):
    sup.ensure_global_server_args()
    return SpeculativeAlgorithm.from_string("EAGLE").create_future_map(
        torch.device("cpu"),
        SimpleNamespace(req_to_token=torch.zeros(POOL, 4)),
        dsa_topk_indices_width=width,
    )


def _stash(fmap, slots, seed, base):
    """Stash a batch as the scheduler does; returns the draft input it keeps."""
    payload = sup.draft_input(len(slots), seed=seed, base=base)
    fmap.stash(torch.tensor(slots), payload)
    payload.future_indices = torch.tensor(slots)
    return payload


def _resolve(fmap, draft_input):
    fmap._resolve_spec_extras(SimpleNamespace(spec_info=draft_input))
    return draft_input


def test_seed_buffer_is_made_with_the_future_map_not_by_a_stash():
    fmap = _future_map()
    # before any stash: one int32 row per request slot, "no key" throughout
    assert fmap.dsa_topk_indices_buf is not None
    assert fmap.dsa_topk_indices_buf.shape == (POOL, sup.INDEX_TOPK)
    assert fmap.dsa_topk_indices_buf.dtype == torch.int32
    assert bool((fmap.dsa_topk_indices_buf == -1).all())
    buf = fmap.dsa_topk_indices_buf
    _stash(fmap, [1, 2], sup.seed_rows(2), base=0)
    assert fmap.dsa_topk_indices_buf is buf  # written in place, never reallocated

    # a worker that does not seed gets no buffer, and a stash never makes one
    plain = _future_map(width=None)
    relayed = _stash(plain, [1, 2], sup.seed_rows(2), base=0)
    assert plain.dsa_topk_indices_buf is None
    assert relayed.future_dsa_topk_indices_available is False
    assert _resolve(plain, relayed).dsa_topk_indices is None


@pytest.mark.parametrize("seeds, width", [(True, sup.INDEX_TOPK), (False, None)])
def test_the_scheduler_is_told_the_width_by_the_worker(seeds, width):
    draft = sup.draft_worker(sup.StandInDraftRunner(sup.StandInDecoder(), index_share=seeds))
    draft._init_dsa_index_share_state()
    spec_worker = object.__new__(worker_mod.EAGLEWorkerV2)
    spec_worker._draft_worker = draft
    assert spec_worker.dsa_seed_topk_width == width


def test_stash_resolve_round_trip_interleaved():
    fmap = _future_map()
    seed_a = sup.seed_rows(3, base=100)  # rows 101, 102, 103
    seed_c = sup.seed_rows(2, base=300)  # rows 301, 302
    a = _stash(fmap, [3, 5, 1], seed_a, base=0)  # batch A, seeded
    b = _stash(fmap, [2, 7], None, base=10)  # batch B, prefilled (no seed)
    c = _stash(fmap, [4, 9], seed_c, base=20)  # batch C, seeded
    assert (a.future_dsa_topk_indices_available, b.future_dsa_topk_indices_available) == (True, False)
    assert c.future_dsa_topk_indices_available is True

    # Next forward: a merged and reordered batch of A's and C's requests,
    # still holding a stale tensor of the wrong rows.
    merged = sup.draft_input(4, seed=STALE[:4], future_indices=torch.tensor([5, 9, 3, 4]))
    merged.future_dsa_topk_indices_available = True
    out = _resolve(fmap, merged)

    # The fields FutureMap already relayed line up with the requests ...
    assert out.topk_index[:, 0].tolist() == [1, 21, 0, 20]
    # ... and so do the seeds, read from the relay, not the stale tensor.
    assert out.dsa_topk_indices[:, 0].tolist() == [102, 302, 101, 301]
    assert out.dsa_topk_indices.dtype == torch.int32
    assert torch.equal(out.dsa_topk_indices[2], seed_a[0])


def test_an_unflagged_draft_input_resolves_to_no_seed_whatever_it_holds():
    fmap = _future_map()
    _stash(fmap, [1, 2], sup.seed_rows(2), base=0)
    _stash(fmap, [6], None, base=5)

    held = sup.draft_input(1, seed=STALE[:1], future_indices=torch.tensor([6]))
    assert held.future_dsa_topk_indices_available is False
    out = _resolve(fmap, held)
    assert out.dsa_topk_indices is None  # the loop computes its top-k
    assert out.topk_index[:, 0].tolist() == [5]


def test_filter_keeps_the_flag_and_the_surviving_rows():
    fmap = _future_map()
    running = _stash(fmap, [0, 1, 2], sup.seed_rows(3, base=10), base=0)
    running.filter_batch(torch.tensor([0, 2]))  # request in slot 1 finished
    assert running.has_dsa_topk_indices() is True
    assert _resolve(fmap, running).dsa_topk_indices[:, 0].tolist() == [11, 13]


def test_merge_with_an_unseeded_stash_relays_no_seed():
    """A running, seeded batch merged with a just-prefilled one whose stash had
    no seed: no zero or stale row is relayed as indices; the loop computes."""
    fmap = _future_map()
    running = _stash(fmap, [0, 1], sup.seed_rows(2, base=10), base=0)
    _stash(fmap, [4], sup.seed_rows(1, base=40), base=40)  # slot 4's previous owner
    joining = _stash(fmap, [4], None, base=7)  # new request in slot 4, prefilled without seed

    running.merge_batch(joining)
    assert running.has_dsa_topk_indices() is False
    out = _resolve(fmap, running)
    assert out.topk_index[:, 0].tolist() == [0, 1, 7]
    assert out.dsa_topk_indices is None


def test_merge_of_seeded_batches_and_of_an_empty_side():
    fmap = _future_map()
    running = _stash(fmap, [0, 1, 2], sup.seed_rows(3, base=10), base=0)
    joining = _stash(fmap, [5, 6], sup.seed_rows(2, base=50), base=50)
    running.filter_batch(torch.tensor([0, 2]))
    running.merge_batch(joining)
    assert running.has_dsa_topk_indices() is True
    assert _resolve(fmap, running).dsa_topk_indices[:, 0].tolist() == [11, 13, 51, 52]

    # An empty side (every request finished) takes the other side's flag.
    empty = _stash(fmap, [], None, base=0)
    empty.future_indices = torch.tensor([], dtype=torch.int64)
    empty.merge_batch(_stash(fmap, [8], sup.seed_rows(1, base=80), base=80))
    assert empty.has_dsa_topk_indices() is True
    assert _resolve(fmap, empty).dsa_topk_indices[:, 0].tolist() == [81]
