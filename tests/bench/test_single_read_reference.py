"""CPU check of the single-read kernel's reference (bench/studies/single_read_kernel.py, issue 17).

``reference_logits`` must compute DeepGEMM's paged MQA logits function from the raw index-K cache
bytes: here against an independent dense formulation (keys gathered per request, einsum), on small
random shapes with scattered pages, ragged lengths and a strided block table.  Runs in well under
a second; the GPU kernel itself is checked against DeepGEMM in tests/gpu/test_sm90_single_read.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from bench.studies import single_read_kernel as sk


def _pool(pages, gen):
    keys = torch.randn(pages, sk.PAGE, sk.DIM, generator=gen)
    scale = keys.abs().amax(-1, keepdim=True) / 448.0
    k8 = (keys / scale).to(torch.float8_e4m3fn)
    raw = torch.empty(pages, sk.PAGE_BYTES, dtype=torch.uint8)
    raw[:, : sk.PAGE * sk.DIM] = k8.view(torch.uint8).reshape(pages, -1)
    raw[:, sk.PAGE * sk.DIM :] = scale.reshape(pages, sk.PAGE).contiguous().view(torch.uint8)
    return raw.view(pages, sk.PAGE, 1, sk.DIM + 4), k8.float(), scale.squeeze(-1)


@pytest.mark.parametrize("next_n", [3, 4])
def test_reference_matches_dense_formula(next_n):
    gen = torch.Generator().manual_seed(next_n)
    pool, keys, scales = _pool(16, gen)
    lens = [300, 70, 129]
    batch = len(lens)
    q = (torch.randn(batch, next_n, sk.HEADS, sk.DIM, generator=gen) * 8).to(torch.float8_e4m3fn)
    w = torch.randn(batch * next_n, sk.HEADS, generator=gen)
    ctx = torch.tensor([[n - next_n + 1 + j for j in range(next_n)] for n in lens], dtype=torch.int32)
    perm = torch.randperm(16, generator=gen)
    table_full = torch.zeros(batch * 2, 6, dtype=torch.int32)  # every 2nd row used: a strided view
    used = 0
    for b, n in enumerate(lens):
        k = math.ceil(n / sk.PAGE)
        table_full[2 * b, :k] = perm[used : used + k]
        used += k
    table = table_full[::2]
    width = 6 * sk.PAGE - 3
    got = sk.reference_logits(q, pool, w, ctx, table, width)
    valid = sk.valid_mask(ctx, width)
    assert int(valid.sum()) == int(ctx.sum())
    for b, n in enumerate(lens):
        pages = table[b, : math.ceil(n / sk.PAGE)].long()
        kb = keys[pages].reshape(-1, sk.DIM).double()
        sb = scales[pages].reshape(-1).double()
        for j in range(next_n):
            row = b * next_n + j
            s = torch.einsum("hd,pd->hp", q[b, j].double(), kb).clamp(min=0)
            want = torch.einsum("h,hp->p", w[row].double(), s) * sb
            L = int(ctx[b, j])
            torch.testing.assert_close(got[row, :L], want[:L], rtol=1e-12, atol=1e-9)
            assert torch.isnan(got[row, kb.shape[0] :]).all()  # pages past the request: not written
