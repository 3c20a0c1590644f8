"""Patch 6: the DSA top-k seed captured inside the draft-extend CUDA graph (CPU checks).

With ``index_share_for_mtp_iteration`` the draft loop reuses the indexer top-k of each
request's last verified token, which draft-extend computes. Here the draft-extend pass
replays a graph: the real runner, worker, ``DeepseekModelNextN`` and indexer (stand-ins as
in ``p56_support``). The reference is the eager draft-extend, whose seed patch 3 keeps.
"""

from __future__ import annotations

import p34_support as sup
import p56_support as T
import pytest
import torch

NEXT_N = 3


def _seeding_worker(monkeypatch, capture_bs=(2, 4), decoder=None):
    T.install(monkeypatch, NEXT_N)
    decoder = T.IndexerDecoder(seed=5) if decoder is None else decoder
    worker = T.draft_worker(NEXT_N, decoder, T.make_backend(NEXT_N), index_share=True)
    runner = T.capture_worker_graphs(monkeypatch, worker, capture_bs)
    return worker, runner, decoder


def _eager_seed(worker, seq_lens, accept, seed=0):
    """Patch 3's seed: the eager draft-extend keeps the rows of the last verified tokens."""
    fb = T.draft_extend_batch(NEXT_N, seq_lens, accept, seed=seed)
    fb.spec_info.dsa_seed_topk_select = T.last_verified_rows(accept, NEXT_N)
    T.run_eager(worker, fb)
    return fb.spec_info.dsa_seed_topk_capture


def _same_keys(a, b):
    return a.shape == b.shape and torch.equal(a.sort(-1).values, b.sort(-1).values)


def test_seeding_worker_captures_graphs_that_write_the_seed(monkeypatch):
    worker, runner, decoder = _seeding_worker(monkeypatch, capture_bs=(1, 2, 4))
    assert runner is not None, "a seeding DSA worker captures its draft-extend graph"
    assert sorted(key.size for key in runner.backend.graphs) == [1, 2, 4]
    buf = runner.buffers.dsa_seed_topk_capture
    assert buf.shape == (4 * NEXT_N, T.S.INDEX_TOPK) and buf.dtype == torch.int32
    assert runner.dsa_seed_topk_graphs == {1, 2, 4}
    # captured with the seed buffer, not a selection: the rows are known only at replay
    assert decoder.indexer_calls == 2 * 3  # warm-up and capture of each size, no reuse


@pytest.mark.parametrize("raw_bs", [1, 2, 3, 4])
def test_replayed_draft_extend_seeds_the_draft_loop(monkeypatch, raw_bs):
    worker, runner, decoder = _seeding_worker(monkeypatch)
    seq_lens = T.seq_lens_for(raw_bs, NEXT_N, seed=raw_bs)
    accept = [1 + (i + 1) % NEXT_N for i in range(raw_bs)]
    got = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(NEXT_N, seq_lens, accept), accept)
    assert len(runner.backend.replayed) == 1 and worker.draft_runner.eager_forwards == 0

    seed = got.dsa_topk_indices
    ref = _eager_seed(worker, seq_lens, accept)
    assert seed is not None and seed.dtype == torch.int32
    assert _same_keys(seed, ref)
    # its own tensor: the next replay overwrites the static buffer, not this seed
    buf = runner.buffers.dsa_seed_topk_capture
    kept = seed.clone()
    buf.fill_(-5)
    assert torch.equal(seed, kept)

    # the draft loop reads it from step 0 and runs no indexer pass
    calls = decoder.indexer_calls
    decoder.prev_seen.clear()
    got.positions = None
    _run_draft_loop(worker, got, raw_bs)
    assert decoder.indexer_calls == calls
    assert decoder.prev_seen and all(torch.equal(p, kept) for p in decoder.prev_seen)


def _run_draft_loop(worker, draft_input, bs):
    fb = sup.forward_batch("DECODE", bs, bs * worker.speculative_num_steps, draft_input)
    fb.input_ids = torch.zeros(bs, dtype=torch.int64)
    fb.positions = torch.full((bs,), 10, dtype=torch.int64)
    worker.draft_forward(fb)


def test_two_replays_seed_each_their_own_batch(monkeypatch):
    worker, runner, _ = _seeding_worker(monkeypatch)
    first_lens, second_lens = T.seq_lens_for(3, NEXT_N, seed=1), T.seq_lens_for(4, NEXT_N, seed=2)
    first = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(NEXT_N, first_lens, [3, 1, 2]), [3, 1, 2])
    kept = first.dsa_topk_indices.clone()
    second = T.run_draft_extend_for_decode(
        worker, T.draft_extend_batch(NEXT_N, second_lens, [1, 1, 3, 2], seed=4), [1, 1, 3, 2]
    )
    assert runner.backend.replayed == [4, 4]
    assert torch.equal(first.dsa_topk_indices, kept)
    assert _same_keys(second.dsa_topk_indices, _eager_seed(worker, second_lens, [1, 1, 3, 2], seed=4))


def test_batch_beyond_the_graphs_keeps_the_eager_seed(monkeypatch):
    worker, runner, _ = _seeding_worker(monkeypatch)
    seq_lens = T.seq_lens_for(5, NEXT_N, seed=3)
    accept = [2, 3, 1, 1, 3]
    got = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(NEXT_N, seq_lens, accept), accept)
    assert runner.backend.replayed == [] and worker.draft_runner.eager_forwards == 1
    assert torch.equal(got.dsa_topk_indices, _eager_seed(worker, seq_lens, accept))


def test_graph_without_a_top_k_seeds_nothing(monkeypatch):
    """A draft forward that hands back no top-k writes no seed while capturing: its replay leaves the
    draft loop to compute (never a buffer row nobody wrote)."""
    worker, runner, decoder = _seeding_worker(monkeypatch, decoder=T.IndexerDecoder(gives_topk=False))
    assert runner.dsa_seed_topk_graphs == set()
    accept = [1, 3]
    got = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(NEXT_N, T.seq_lens_for(2, NEXT_N), accept), accept)
    assert runner.backend.replayed == [2]
    assert got.dsa_topk_indices is None


def test_without_index_share_the_graph_has_no_seed_buffer(monkeypatch):
    T.install(monkeypatch, NEXT_N)
    worker = T.draft_worker(NEXT_N, T.IndexerDecoder(), T.make_backend(NEXT_N), index_share=False)
    runner = T.capture_worker_graphs(monkeypatch, worker, [2])
    assert runner.buffers.dsa_seed_topk_capture is None and runner.dsa_seed_topk_graphs == set()
    accept = [2, 1]
    got = T.run_draft_extend_for_decode(worker, T.draft_extend_batch(NEXT_N, T.seq_lens_for(2, NEXT_N), accept), accept)
    assert got.dsa_topk_indices is None


def test_hisparse_graph_keeps_no_seed(monkeypatch):
    # HiSparse decode reads an unfused top-k: the worker never asks for a seed, the graph keeps none
    T.install(monkeypatch, NEXT_N)
    backend = T.make_backend(NEXT_N)
    backend.hisparse_coordinator = object()
    worker = T.draft_worker(NEXT_N, T.IndexerDecoder(), backend, index_share=True)
    worker.draft_runner.attn_backend = backend
    runner = T.capture_worker_graphs(monkeypatch, worker, [2])
    assert runner.buffers.dsa_seed_topk_capture is None


def test_gpu_test_seeds_for_each_next_n_and_decode_backend(gpu_test_classes):
    """The GPU test in sglang's tree checks the seed of a replayed graph for next_n 2-6 and both DSA decode
    backends, one IndexShare class per pair beside patch 5's; without a GPU each test skips, saying why."""
    classes = gpu_test_classes
    for n in (2, 3, 4, 5, 6):
        for backend in ("flashmla_sparse", "flashmla_kv"):
            tests = classes[f"TestDSADraftExtendCudaGraphSeed_n{n}_{backend}"]
            assert {"test_graphs_write_the_seed", "test_replay_keeps_the_seed_of_each_last_verified_token"} <= set(
                tests
            ), tests
            assert set(tests.values()) == {"needs an SM90 or SM100 GPU with DeepGEMM"}, tests
