"""One-read paged MQA logits for DSA target_verify on SM90 (Triton), and its CPU reference.

Same inputs as DeepGEMM's ``fp8_paged_mqa_logits`` in the native ``[B, next_n]`` layout:

- ``q``            fp8 e4m3 ``[B, next_n, H, D]`` (H = 64 heads, D = 128),
- ``kv_cache``     uint8 ``[num_pages, 64, 1, D + 4]``: per page, 64 x D fp8 key values, then 64
                   float32 scales (one per token); 132 bytes per token,
- ``weights``      float32 ``[B * next_n, H]`` (the q scales already folded in),
- ``context_lens`` int32 ``[B, next_n]``: token j of request b sees positions ``< context_lens[b, j]``,
- ``block_table``  int32 ``[B, max_pages]`` (any row stride),
- ``max_context_len``: the logits width.

Output: float32 logits ``[B * next_n, max_context_len]``; row ``b * next_n + j``, position p:
``scale_k[p] * sum_h weights[b*next_n+j, h] * relu(q[b, j, h] . k[p])``, the function
DeepGEMM computes (relu and the head weights before the head sum, the key scale after it).
Positions ``>= context_lens[b, j]`` inside the last page hold values of the same formula, as
DeepGEMM's do with ``clean_logits=False``; pages past a request's last are not written.

One Triton program per (request, run of ``pages_per_prog`` pages): it loads its request's q (all
next_n tokens) once, then for each page reads the 64 keys once and computes every token's logits
from them.  No schedule metadata, no host synchronisation: the grid depends only on B and
``max_context_len`` (both fixed for a captured CUDA graph); programs past a request's last page
return at once.  Works for any next_n in 1..4.

``reference_logits`` is the same function in plain torch (float64 by default, runs on the CPU).
"""

from __future__ import annotations

import math

PAGE = 64
HEADS = 64
DIM = 128
PAGE_BYTES = PAGE * (DIM + 4)

try:  # the kernel needs triton; the reference only torch
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None


if triton is not None:

    @triton.jit
    def _epilogue(s, w, scale, out_row_ptr, offs_p, p_mask):
        # relu, head weights, head sum, key scale; one logit per key.
        v = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * scale
        tl.store(out_row_ptr + offs_p, v, mask=p_mask)

    @triton.jit
    def _token_values(k, q_tile, w, scale):
        s = tl.dot(k, q_tile)
        return tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * scale

    @triton.jit
    def _one_token(k, q_tile, w, scale, out_row_ptr, offs_p, p_mask):
        # [PAGE, D] @ [D, H] -> [PAGE, H], then the epilogue
        _epilogue(tl.dot(k, q_tile), w, scale, out_row_ptr, offs_p, p_mask)

    @triton.jit
    def _program_pages(ctx_ptr, ctx_stride, NEXT_N: tl.constexpr, PAGE_: tl.constexpr, PAGES_PER_PROG: tl.constexpr):
        # This program's request, the first page of its run, and the request's page count.
        split = tl.program_id(0)
        b = tl.program_id(1).to(tl.int64)
        # The request's KV length: its last draft token sees the most.
        seq_len = tl.load(ctx_ptr + b * ctx_stride + (NEXT_N - 1))
        num_pages = tl.cdiv(seq_len, PAGE_)
        return b, split * PAGES_PER_PROG, num_pages

    @triton.jit
    def _request(q_ptr, w_ptr, out_ptr, out_stride, b, H: tl.constexpr, D: tl.constexpr, NEXT_N: tl.constexpr):
        # Request b: its first output row, and each draft token's q as the [D, H] B operand and head
        # weights, loaded once per program. A token past NEXT_N gets token 0's (no load; never read).
        offs_h = tl.arange(0, H)
        q_req = q_ptr + b * (NEXT_N * H * D)
        qt_offs = tl.arange(0, D)[:, None] + offs_h[None, :] * D
        w_req = w_ptr + b * (NEXT_N * H)
        out_req = out_ptr + b * NEXT_N * out_stride
        q0 = tl.load(q_req + qt_offs)
        w0 = tl.load(w_req + offs_h)
        q1, q2, q3 = q0, q0, q0
        w1, w2, w3 = w0, w0, w0
        if NEXT_N > 1:
            q1 = tl.load(q_req + H * D + qt_offs)
            w1 = tl.load(w_req + H + offs_h)
        if NEXT_N > 2:
            q2 = tl.load(q_req + 2 * H * D + qt_offs)
            w2 = tl.load(w_req + 2 * H + offs_h)
        if NEXT_N > 3:
            q3 = tl.load(q_req + 3 * H * D + qt_offs)
            w3 = tl.load(w_req + 3 * H + offs_h)
        return out_req, q0, w0, q1, w1, q2, w2, q3, w3

    @triton.jit
    def _store_joined(
        k,
        q0,
        w0,
        q1,
        w1,
        q2,
        w2,
        q3,
        w3,
        scale,
        out_req,
        out_stride,
        offs_p,
        p_mask,
        ROWS: tl.constexpr,
        NEXT_N: tl.constexpr,
        NP2: tl.constexpr,
    ):
        # every token's logits of a [ROWS, D] key tile joined into one [ROWS, NP2] tile and stored once
        # (one layout change and one barrier per tile instead of one per token)
        v0 = _token_values(k, q0, w0, scale)
        if NEXT_N == 1:
            v_all = tl.reshape(tl.join(v0, v0), (ROWS, 2))
        elif NEXT_N == 2:
            v1 = _token_values(k, q1, w1, scale)
            v_all = tl.join(v0, v1)
        else:
            v1 = _token_values(k, q1, w1, scale)
            v2 = _token_values(k, q2, w2, scale)
            if NEXT_N == 4:
                v3 = _token_values(k, q3, w3, scale)
            else:
                v3 = v2
            v_all = tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), (ROWS, 4))
        offs_j = tl.arange(0, NP2 if NP2 > 1 else 2)
        o_ptrs = out_req + offs_j[None, :] * out_stride + offs_p[:, None]
        tl.store(o_ptrs, v_all, mask=p_mask[:, None] & (offs_j[None, :] < NEXT_N))

    @triton.jit
    def _two_pages(kv_ptr, table_row, i, last, offs_r, offs_d, out_width, PAGE_: tl.constexpr, D: tl.constexpr):
        # Pages i and i + 1 as one [2 * PAGE, D] key tile (one warpgroup per page with num_warps=8), their
        # scales and logit positions; the second is masked off past the run's last page.
        in_page = offs_r % PAGE_
        page_idx = i + offs_r // PAGE_
        row_ok = page_idx < last
        page = tl.load(table_row + page_idx, mask=row_ok, other=0).to(tl.int64)
        row_ptr = kv_ptr + page * (PAGE_ * (D + 4))
        k = tl.load(row_ptr[:, None] + in_page[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        scale = tl.load((row_ptr + PAGE_ * D).to(tl.pointer_type(tl.float32)) + in_page, mask=row_ok, other=0.0)
        offs_p = i * PAGE_ + offs_r
        return k, scale, offs_p, row_ok & (offs_p < out_width)

    @triton.jit
    def _single_read_kernel(
        q_ptr,
        kv_ptr,
        k_desc,
        w_ptr,
        ctx_ptr,
        table_ptr,
        out_ptr,
        ctx_stride,
        table_stride,
        out_stride,
        out_width,
        NEXT_N: tl.constexpr,
        H: tl.constexpr,
        D: tl.constexpr,
        PAGE_: tl.constexpr,
        PAGES_PER_PROG: tl.constexpr,
        NUM_STAGES: tl.constexpr,
        USE_TMA: tl.constexpr,
        DOTS_FIRST: tl.constexpr,
        FUSED: tl.constexpr,
        NP2: tl.constexpr,
        ONE_STORE: tl.constexpr,
        X2: tl.constexpr,
    ):
        # X2: two pages per step, every token's logits joined and stored once per step.
        ROWS: tl.constexpr = PAGE_ * (2 if X2 else 1)
        b, first, num_pages = _program_pages(ctx_ptr, ctx_stride, NEXT_N, PAGE_, PAGES_PER_PROG)
        if first < num_pages:
            last = tl.minimum(first + PAGES_PER_PROG, num_pages)
            offs_r = tl.arange(0, ROWS)
            offs_d = tl.arange(0, D)
            out_req, q0, w0, q1, w1, q2, w2, q3, w3 = _request(q_ptr, w_ptr, out_ptr, out_stride, b, H, D, NEXT_N)
            if FUSED:
                # every token's q as one [D, NP2 * H] B operand
                q_req = q_ptr + b * (NEXT_N * H * D)
                w_req = w_ptr + b * (NEXT_N * H)
                offs_h = tl.arange(0, H)
                offs_n = tl.arange(0, NP2 * H)
                q_all = tl.load(
                    q_req + offs_d[:, None] + offs_n[None, :] * D, mask=offs_n[None, :] < NEXT_N * H, other=0.0
                )
                offs_t = tl.arange(0, NP2)
                w_all = tl.load(w_req + offs_t[:, None] * H + offs_h[None, :], mask=offs_t[:, None] < NEXT_N, other=0.0)
            table_row = table_ptr + b * table_stride
            k_offs = offs_r[:, None] * D + offs_d[None, :]
            for i in tl.range(first, last, ROWS // PAGE_, num_stages=NUM_STAGES):
                if X2:
                    k, scale, offs_p, p_mask = _two_pages(
                        kv_ptr, table_row, i, last, offs_r, offs_d, out_width, PAGE_, D
                    )
                else:
                    page = tl.load(table_row + i).to(tl.int64)
                    page_ptr = kv_ptr + page * (PAGE_ * (D + 4))
                    if USE_TMA:
                        # the page's keys by the bulk tensor copy engine: [1, PAGE, D] box of a
                        # [pages, PAGE, D] view whose page stride is PAGE * (D + 4) bytes
                        k = k_desc.load([page.to(tl.int32), 0, 0]).reshape(PAGE_, D)
                    else:
                        k = tl.load(page_ptr + k_offs)
                    scale = tl.load((page_ptr + PAGE_ * D).to(tl.pointer_type(tl.float32)) + offs_r)
                    offs_p = i * PAGE_ + offs_r
                    p_mask = offs_p < out_width
                if FUSED:
                    # one [PAGE, D] @ [D, NP2 * H] product for all tokens, split per token after
                    s_all = tl.dot(k, q_all)
                    s3d = tl.reshape(s_all, (PAGE_, NP2, H))
                    v_all = tl.sum(tl.maximum(s3d, 0.0) * w_all[None, :, :], axis=2) * scale[:, None]
                    o_ptrs = out_req + offs_t[None, :] * out_stride + offs_p[:, None]
                    tl.store(o_ptrs, v_all, mask=p_mask[:, None] & (offs_t[None, :] < NEXT_N))
                elif ONE_STORE or X2:
                    _store_joined(
                        k, q0, w0, q1, w1, q2, w2, q3, w3, scale, out_req, out_stride, offs_p, p_mask, ROWS, NEXT_N, NP2
                    )
                elif DOTS_FIRST:
                    # every token's MMA issued before the first epilogue: the tensor cores run
                    # token j+1's product while the CUDA cores reduce token j's
                    s0 = tl.dot(k, q0)
                    if NEXT_N > 1:
                        s1 = tl.dot(k, q1)
                    if NEXT_N > 2:
                        s2 = tl.dot(k, q2)
                    if NEXT_N > 3:
                        s3 = tl.dot(k, q3)
                    _epilogue(s0, w0, scale, out_req, offs_p, p_mask)
                    if NEXT_N > 1:
                        _epilogue(s1, w1, scale, out_req + out_stride, offs_p, p_mask)
                    if NEXT_N > 2:
                        _epilogue(s2, w2, scale, out_req + 2 * out_stride, offs_p, p_mask)
                    if NEXT_N > 3:
                        _epilogue(s3, w3, scale, out_req + 3 * out_stride, offs_p, p_mask)
                else:
                    _one_token(k, q0, w0, scale, out_req, offs_p, p_mask)
                    if NEXT_N > 1:
                        _one_token(k, q1, w1, scale, out_req + out_stride, offs_p, p_mask)
                    if NEXT_N > 2:
                        _one_token(k, q2, w2, scale, out_req + 2 * out_stride, offs_p, p_mask)
                    if NEXT_N > 3:
                        _one_token(k, q3, w3, scale, out_req + 3 * out_stride, offs_p, p_mask)


def pick_pages_per_prog(batch_size: int, max_pages: int, num_sms: int = 132) -> int:
    """Pages per program: about 32 programs per SM (3 fit at once: many short waves, a small tail), 8 to 64 pages.

    The first H200 grid used 8 programs per SM: about 2.6 waves, and ncu put the tail at up to a third
    of the time (docs/results/sm90_single_read_h200_ncu.txt).
    """
    target_programs = 32 * num_sms
    per = max(1, math.ceil(batch_size * max_pages / target_programs))
    p = 8  # fewer pages per program re-read q (32 KB at next_n 4) too often: 4 was slower than 8 in the sweep
    while p < per and p < 64:
        p *= 2
    return p


def single_read_logits(
    q,
    kv_cache,
    weights,
    context_lens,
    block_table,
    max_context_len: int,
    *,
    out=None,
    pages_per_prog: int | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    use_tma: bool = True,
    dots_first: bool = False,
    fused: bool = False,
    one_store: bool = False,
    x2: bool = False,
):
    """Logits ``[B*next_n, max_context_len]`` float32; see the module docstring."""
    import torch

    batch, next_n, heads, dim = q.shape
    assert 1 <= next_n <= 4, "next_n 1..4"
    assert heads == HEADS and dim == DIM, (heads, dim)
    assert q.dtype == torch.float8_e4m3fn and q.is_contiguous()
    assert kv_cache.dtype == torch.uint8 and kv_cache.shape[1:] == (PAGE, 1, DIM + 4)
    assert kv_cache.is_contiguous()
    assert weights.dtype == torch.float32 and weights.shape == (batch * next_n, heads) and weights.is_contiguous()
    assert context_lens.dtype == torch.int32 and context_lens.shape == (batch, next_n)
    assert context_lens.stride(1) == 1
    assert block_table.dtype == torch.int32 and block_table.dim() == 2 and block_table.shape[0] == batch
    assert block_table.stride(1) == 1
    max_pages = block_table.shape[1]
    if out is None:
        out = torch.empty((batch * next_n, max_context_len), dtype=torch.float32, device=q.device)
    if pages_per_prog is None:
        pages_per_prog = pick_pages_per_prog(batch, min(max_pages, math.ceil(max_context_len / PAGE)))
    grid = (math.ceil(min(max_pages, math.ceil(max_context_len / PAGE)) / pages_per_prog), batch)
    kv_fp8 = kv_cache.view(torch.float8_e4m3fn)
    tensors = (weights, context_lens, block_table, out)
    strides = (context_lens.stride(0), block_table.stride(0), out.stride(0), out.shape[1])
    # what both kernels are compiled for: the tile shapes, and how the pages are spread
    shape = dict(H=HEADS, D=DIM, PAGE_=PAGE, NEXT_N=next_n, NP2=triton.next_power_of_2(next_n))
    schedule = dict(PAGES_PER_PROG=pages_per_prog, NUM_STAGES=num_stages, num_warps=num_warps)
    if x2:
        assert pages_per_prog % 2 == 0
        use_tma = dots_first = fused = one_store = False  # the two-page step reads keys by pointer, stores once
    k_desc = None
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k_desc = TensorDescriptor(kv_fp8.view(-1), [kv_cache.shape[0], PAGE, DIM], [PAGE_BYTES, DIM, 1], [1, PAGE, DIM])
    variant = dict(USE_TMA=use_tma, DOTS_FIRST=dots_first, FUSED=fused, ONE_STORE=one_store, X2=x2)
    _single_read_kernel[grid](q, kv_fp8, k_desc, *tensors, *strides, **variant, **shape, **schedule)
    return out


def split_kv_cache(kv_cache):
    """(keys fp32 [P, 64, D], scales fp32 [P, 64]) from the uint8 index-K cache (any device)."""
    import torch

    pages = kv_cache.shape[0]
    flat = kv_cache.reshape(pages, PAGE_BYTES)
    keys = flat[:, : PAGE * DIM].contiguous().view(torch.float8_e4m3fn).view(pages, PAGE, DIM).float()
    scales = flat[:, PAGE * DIM :].contiguous().view(torch.float32).view(pages, PAGE)
    return keys, scales


def reference_logits(q, kv_cache, weights, context_lens, block_table, max_context_len, dtype=None):
    """The same function in plain torch: float64 by default; NaN where a position is past the row's pages.

    Runs anywhere torch does (CPU included).  Positions ``< context_lens[b, j]`` are the ones that
    matter; positions after them in the same page are computed too (DeepGEMM writes them).
    """
    import torch

    dtype = dtype or torch.float64
    batch, next_n, heads, dim = q.shape
    keys, scales = split_kv_cache(kv_cache)
    out = torch.full((batch * next_n, max_context_len), float("nan"), dtype=dtype)
    qf = q.float().to(dtype).cpu()
    w = weights.to(dtype).cpu()
    ctx = context_lens.cpu()
    table = block_table.cpu()
    for b in range(batch):
        n_pages = math.ceil(int(ctx[b, next_n - 1]) / PAGE)
        pages = table[b, :n_pages].long()
        k = keys.cpu()[pages].reshape(-1, dim).to(dtype)  # [n_pages*64, D]
        s = scales.cpu()[pages].reshape(-1).to(dtype)
        width = min(k.shape[0], max_context_len)
        for j in range(next_n):
            row = b * next_n + j
            dots = qf[b, j] @ k.T  # [H, P]
            vals = (dots.clamp(min=0) * w[row][:, None]).sum(0) * s
            out[row, :width] = vals[:width]
    return out


def valid_mask(context_lens, max_context_len):
    """Bool [B*next_n, max_context_len]: the positions each token attends to."""
    import torch

    ctx = context_lens.reshape(-1).cpu().long()
    return torch.arange(max_context_len)[None, :] < ctx[:, None]
