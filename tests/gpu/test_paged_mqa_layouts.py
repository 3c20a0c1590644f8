"""Real-DeepGEMM check of the target_verify paged MQA layouts (patches 1-2).

On an SM90 GPU with DeepGEMM installed, the layouts the patched DSA indexer
can pick for target_verify must give the same logits as the per-token layout
(sglang v0.5.14's SM90 path) on every position a token may attend to:

- native: q [B, 2, H, D], context lengths [B, 2], every 2nd block-table row;
- paired: q [B*next_n/2, 2, H, D], context lengths [B*next_n/2, 2], every
  2nd block-table row (next_n = 4 and 6).

Inputs are random bf16 quantised to fp8 like the indexer does, with pages
scattered at random over a pool, and are viewed exactly as the patched
``_get_topk_paged`` views them (helpers shared with bench/paged_mqa.py).

Skips, with the reason, where there is no CUDA device, no SM90 device, or no
``deep_gemm``; run with ``pytest -rs`` to see it.

What this test does NOT run: any sglang code.  The q / context-length / block-table views
are re-implemented in ``bench/paged_mqa.py`` (they mirror what the patched
``Indexer._get_topk_paged`` does, but they are not it); the DSA backend's metadata,
``_get_topk_paged``, ``topk_transform`` and sgl-kernel's fused top-k never run here.  It
proves DeepGEMM's kernel gives per-token's logits in the native and paired layouts, nothing
more.  The real indexer path (the patched backend and indexer, eager and CUDA graph, against
per-token and pristine v0.5.14) is ``test_indexer_paged_mqa.py``.
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
    "no CUDA device: DeepGEMM kernels need a GPU", "the SM90 layout rule needs an SM90 (Hopper) GPU, found {sm}"
)


@pytest.fixture(scope="module")
def kv_pool():
    return pm.make_kv_pool(8192, torch.device("cuda"), seed=7)


def _seq_lens(batch_size: int, max_len: int, next_n: int, seed: int):
    """Lengths (prefix + drafts) with ragged tails, one at the cap, one short."""
    rng = random.Random(seed)
    lens = [rng.randint(max(next_n, max_len // 3), max_len) for _ in range(batch_size)]
    lens[0] = max_len
    if batch_size > 1:
        lens[-1] = rng.randint(next_n, 2 * pm.PAGE + 5)
    return lens


def _batch(kv_pool, batch_size, max_len, next_n, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lens = _seq_lens(batch_size, max_len, next_n, seed)
    needed = sum(math.ceil(n / pm.PAGE) for n in lens)
    assert needed <= kv_pool.shape[0]
    pages = torch.randperm(kv_pool.shape[0], device="cuda", generator=gen)[:needed]
    return pm.make_batch(lens, next_n, pages, torch.device("cuda"), gen)


def _assert_equal_on_valid(batch, ref, got):
    assert (
        got.shape
        == ref.shape
        == (
            batch.batch_size * batch.next_n,
            batch.max_context_len,
        )
    )
    cols = torch.arange(batch.max_context_len, device="cuda")
    valid = cols[None, :] < batch.ctx_lens[:, None]
    assert int(valid.sum()) == int(batch.ctx_lens.sum())
    diff = (ref - got).abs()[valid]
    assert torch.isfinite(ref[valid]).all()
    assert torch.equal(ref[valid], got[valid]), (
        f"max |diff| {diff.max().item():.3e} over {int((diff > 0).sum())} " f"of {diff.numel()} valid positions"
    )


CASES = [
    (1, 300),
    (3, 1000),
    (8, 4096),
    (17, 2500),
    (32, 6000),
]


@pytest.mark.parametrize("batch_size,max_len", CASES)
def test_native_next_n_2_matches_per_token(kv_pool, batch_size, max_len):
    batch = _batch(kv_pool, batch_size, max_len, 2, seed=batch_size * 31 + max_len)
    ref = pm.run_layout(deep_gemm, kv_pool, batch, "per_token")
    got = pm.run_layout(deep_gemm, kv_pool, batch, "native")
    torch.cuda.synchronize()
    _assert_equal_on_valid(batch, ref, got)


@pytest.mark.parametrize("next_n", [4, 6])
@pytest.mark.parametrize("batch_size,max_len", CASES)
def test_paired_matches_per_token(kv_pool, next_n, batch_size, max_len):
    batch = _batch(kv_pool, batch_size, max_len, next_n, seed=batch_size + max_len)
    ref = pm.run_layout(deep_gemm, kv_pool, batch, "per_token")
    got = pm.run_layout(deep_gemm, kv_pool, batch, "paired")
    torch.cuda.synchronize()
    _assert_equal_on_valid(batch, ref, got)


def test_views_share_storage_and_keep_unit_column_stride(kv_pool):
    batch = _batch(kv_pool, 4, 700, 4, seed=5)
    q, _, ctx, table = pm.layout_args(batch, "paired")
    assert q.shape == (8, 2, pm.HEADS, pm.DIM)
    assert q.data_ptr() == batch.q_fp8.data_ptr()
    assert table.data_ptr() == batch.block_table.data_ptr()
    assert table.stride() == (2 * batch.block_table.stride(0), 1)
    assert ctx.is_contiguous() and ctx.shape == (8, 2)
    # pair p of request b holds tokens 2p, 2p+1: lengths L-4+2p+1, L-4+2p+2
    for b, length in enumerate(batch.seq_lens):
        for p in range(2):
            assert ctx[2 * b + p].tolist() == [length - 4 + 2 * p + 1, length - 4 + 2 * p + 2]
            assert torch.equal(table[2 * b + p], batch.block_table[4 * b])


def test_sm90_refuses_native_next_n_4(kv_pool):
    """Why paired exists: SM90 DeepGEMM takes at most two tokens per row."""
    batch = _batch(kv_pool, 2, 500, 4, seed=11)
    # DeepGEMM's host assert surfaces as a tvm-ffi error whose class is not
    # part of its API; any exception will do, a silent result would not.
    with pytest.raises(Exception):  # noqa: B017
        pm.run_layout(deep_gemm, kv_pool, batch, "native")
        torch.cuda.synchronize()
