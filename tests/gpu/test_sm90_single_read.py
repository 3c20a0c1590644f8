"""GPU checks of the single-read paged MQA logits kernel (bench/studies/single_read_kernel.py, issue 17).

On an SM90 GPU with DeepGEMM: the Triton kernel ``_single_read_kernel`` must give DeepGEMM per-token's
logits (``fp8_paged_mqa_logits``, one token per row) on every position a token attends to, up to
float32 summation order, for next_n 1 to 4, ragged lengths, pages scattered over a pool and a block
table with a row stride (the strided view the DSA backend hands over); and the float64 reference of
the same module must agree with both.  Under a CUDA graph, replaying with new context lengths and a
new block table (same tensors, same max_context_len) gives the new logits: nothing is decided on the
host from device data.

Skips, with the reason, where there is no CUDA device, no SM90 device, no triton or no deep_gemm.
What it does NOT run: any sglang code (the kernel is called directly).
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

from bench import paged_mqa as pm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_trees  # noqa: E402

pytestmark = pytest.mark.gpu

torch, deep_gemm = gpu_trees.sm90_kernels_or_skip(
    "no CUDA device: the Triton kernel and DeepGEMM need a GPU",
    "the kernel targets SM90 (Hopper); found {sm}",
    "triton",
)

from bench.studies import single_read_kernel as sk  # noqa: E402

REL_TOL = 2e-6  # float32 sums of 64 terms in another order; observed about 1e-7


@pytest.fixture(scope="module")
def kv_pool():
    return pm.make_kv_pool(4096, torch.device("cuda"), seed=11)


def _batch(kv_pool, batch_size, max_len, next_n, seed):
    rng = random.Random(seed)
    lens = [rng.randint(max(next_n, max_len // 3), max_len) for _ in range(batch_size)]
    lens[0] = max_len
    if batch_size > 1:
        lens[-1] = rng.randint(next_n, 2 * pm.PAGE + 5)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    needed = sum(math.ceil(n / pm.PAGE) for n in lens)
    pages = torch.randperm(kv_pool.shape[0], device="cuda", generator=gen)[:needed]
    return pm.make_batch(lens, next_n, pages, torch.device("cuda"), gen)


def _single(batch, kv_pool, **cfg):
    q = batch.q_fp8.view(batch.batch_size, batch.next_n, pm.HEADS, pm.DIM)
    ctx = batch.ctx_lens.view(batch.batch_size, batch.next_n)
    table = batch.block_table[:: batch.next_n]  # strided rows, as the DSA backend's view
    assert table.stride(0) == batch.next_n * batch.block_table.stride(0)
    return sk.single_read_logits(q, kv_pool, batch.weights, ctx, table, batch.max_context_len, **cfg)


def _valid(batch):
    cols = torch.arange(batch.max_context_len, device="cuda")
    return cols[None, :] < batch.ctx_lens[:, None]


def _rel(ref, got, valid):
    assert torch.isfinite(got[valid]).all()
    return ((ref - got).abs()[valid].max() / ref[valid].abs().max()).item()


CASES = [(1, 300), (3, 1000), (8, 4096), (17, 2500), (33, 6000)]
CONFIGS = [
    {},
    {"use_tma": False},
    {"fused": True, "num_warps": 8},
    {"one_store": True},
    {"one_store": True, "use_tma": False},
    {"x2": True, "num_warps": 8, "pages_per_prog": 8},
    {"pages_per_prog": 4, "num_stages": 4},
]


@pytest.mark.parametrize("next_n", [1, 2, 3, 4])
@pytest.mark.parametrize("batch_size,max_len", CASES)
def test_matches_deepgemm_per_token(kv_pool, next_n, batch_size, max_len):
    batch = _batch(kv_pool, batch_size, max_len, next_n, seed=batch_size * 7 + max_len + next_n)
    ref = pm.run_layout(deep_gemm, kv_pool, batch, "per_token")
    valid = _valid(batch)
    for cfg in CONFIGS:
        got = _single(batch, kv_pool, **cfg)
        torch.cuda.synchronize()
        assert got.shape == ref.shape
        rel = _rel(ref, got, valid)
        assert rel < REL_TOL, (cfg, rel)


@pytest.mark.parametrize("next_n", [3, 4])
def test_matches_float64_reference(kv_pool, next_n):
    batch = _batch(kv_pool, 3, 700, next_n, seed=100 + next_n)
    got = _single(batch, kv_pool).cpu().double()
    q = batch.q_fp8.view(batch.batch_size, next_n, pm.HEADS, pm.DIM)
    ctx = batch.ctx_lens.view(batch.batch_size, next_n)
    ref = sk.reference_logits(q, kv_pool, batch.weights, ctx, batch.block_table[::next_n], batch.max_context_len)
    valid = sk.valid_mask(ctx, batch.max_context_len)
    rel = ((ref - got).abs()[valid].max() / ref[valid].abs().max()).item()
    # Hopper's FP8 MMA accumulates with fewer bits than float32 (DeepGEMM's too): about 2e-4 seen
    assert rel < 2e-3, rel


def test_cuda_graph_replay_with_new_lengths(kv_pool):
    next_n, batch_size, max_len = 4, 6, 3000
    first = _batch(kv_pool, batch_size, max_len, next_n, seed=1)
    second = _batch(kv_pool, batch_size, max_len, next_n, seed=2)
    assert first.max_context_len == second.max_context_len
    assert first.ctx_lens.tolist() != second.ctx_lens.tolist()
    q = first.q_fp8.clone()
    w = first.weights.clone()
    ctx = first.ctx_lens.clone()
    table = first.block_table.clone()
    out = torch.full((batch_size * next_n, first.max_context_len), float("nan"), device="cuda")

    def call():
        sk.single_read_logits(
            q.view(batch_size, next_n, pm.HEADS, pm.DIM),
            kv_pool,
            w,
            ctx.view(batch_size, next_n),
            table[::next_n],
            first.max_context_len,
            out=out,
        )

    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        call()
    for batch in (second, first):
        q.copy_(batch.q_fp8)
        w.copy_(batch.weights)
        ctx.copy_(batch.ctx_lens)
        table.copy_(batch.block_table)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = pm.run_layout(deep_gemm, kv_pool, batch, "per_token")
        valid = _valid(batch)
        assert _rel(ref, out, valid) < REL_TOL
