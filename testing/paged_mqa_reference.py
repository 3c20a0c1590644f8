"""DeepGEMM's ``fp8_paged_mqa_logits`` in plain torch, for the CPU tests of the kernel-level benches.

It stands in for the kernel (which needs an SM90 or SM100 GPU): rows of ``tokens`` query tokens, each
over its block-table row of the fp8 index-K pool that ``bench/paged_mqa.make_kv_pool`` lays out.
"""

from __future__ import annotations

import torch

from bench.paged_mqa import DIM, PAGE


class ReferencePagedMQA:
    """fp8_paged_mqa_logits in plain torch: rows of `tokens` queries, each over its block-table row."""

    def __init__(self, kv_pool):
        pages = kv_pool.view(kv_pool.shape[0], -1)
        values = pages[:, : PAGE * DIM].contiguous().view(torch.float8_e4m3fn).float().view(-1, PAGE, DIM)
        scales = pages[:, PAGE * DIM :].contiguous().view(torch.float32).view(-1, PAGE)
        self.keys = values * scales[..., None]

    def __call__(self, q, kv, weights, ctx, table, schedule, max_len, clean_logits=False):
        rows, tokens, heads = q.shape[:3]
        keys = self.keys[table.long()].reshape(rows, -1, DIM)[:, :max_len]
        scores = torch.einsum("rthd,rkd->rthk", q.float(), keys).relu()
        logits = (scores * weights.view(rows, tokens, heads, 1)).sum(2)
        return logits.reshape(rows * tokens, -1)
