"""Builders shared by test_p1_* and test_p2_* (DSA paged-MQA layout patches).

Real sglang objects from the tree the harness selected, built on CPU:

- ``make_backend``: a ``DeepseekSparseAttnBackend`` made with
  ``object.__new__`` and given the attributes its metadata paths read
  (page size 64, a real ``ReqToTokenPool``-shaped token table, a real
  ``DSATokenToKVPool`` object holding one layer's index-K buffer);
  ``make_forward_batch``, ``make_indexer``, ``run_topk``. The v0.5.23 line's
  support23.py builds on these (its pool, and the attributes 0.5.23 reads).
- ``FakeDeepGemm``: the stand-in for the two DeepGEMM entry points the code
  under test calls (``get_paged_mqa_logits_metadata`` and
  ``fp8_paged_mqa_logits``).  Both record their calls.  The logits one
  applies the host-side checks DeepGEMM makes (SM90: at most two query
  tokens per row, contiguous context lengths shaped like q's first two
  dims, unit column stride and one row per q row in the block table, a
  schedule made from those very context lengths, checked by value so an
  in-place refresh counts) and then computes logits
  in plain torch from the fp8 inputs, bounding each kernel row's keys by
  the last column of its context lengths like the kernel does.  Positions
  it does not write are NaN, so a consumer that reads them fails.
- ``set_arch``: the platform answers dsa_backend reads (SM100, SM90, other
  CUDA, ROCm), patched over the names the module imported.
- ``capture_then_replay``: TARGET_VERIFY metadata captured for a CUDA graph,
  then replayed with new lengths, checking that the replay works in place
  (also used by the v0.5.23 line's tests).
"""

from __future__ import annotations

import math
import types

import torch
from cpu_sglang import RecordingKernel, import_sglang, seqlens_expand_cpu

from testing.dsa_pages import scattered_req_to_token

backend_mod = import_sglang("sglang.srt.layers.attention.dsa_backend")
indexer_mod = import_sglang("sglang.srt.layers.attention.dsa.dsa_indexer")
topk_mod = import_sglang("sglang.srt.layers.attention.dsa.dsa_topk_backend")
fbi = import_sglang("sglang.srt.model_executor.forward_batch_info")
fctx = import_sglang("sglang.srt.model_executor.forward_context")
memory_pool = import_sglang("sglang.srt.mem_cache.memory_pool")

ForwardMode = fbi.ForwardMode
PAGE = 64
HEAD_DIM = 128
NUM_HEADS = 2
INDEX_TOPK = 24
MAX_CONTEXT = 1024

ARCHES = {
    # name: (is_sm100_supported, is_sm90_supported, _is_hip)
    "sm100": (True, False, False),
    "sm90": (False, True, False),
    "sm80": (False, False, False),
    "hip": (False, False, True),
}


def set_arch(monkeypatch, arch: str) -> None:
    sm100, sm90, hip = ARCHES[arch]
    monkeypatch.setattr(backend_mod, "is_sm100_supported", lambda: sm100)
    # dsa_backend imports is_sm90_supported from patch 2 on
    monkeypatch.setattr(backend_mod, "is_sm90_supported", lambda: sm90, raising=False)
    monkeypatch.setattr(backend_mod, "_is_hip", hip)


class FakeDeepGemm:
    """Recording stand-in for the DeepGEMM calls (see module docstring)."""

    def __init__(self, max_tokens_per_row: int = 2, num_sms: int = 132):
        self.max_tokens_per_row = max_tokens_per_row
        self.num_sms = num_sms
        self.get_paged_mqa_logits_metadata = RecordingKernel(self._schedule)
        self.fp8_paged_mqa_logits = RecordingKernel(self._logits)

    def get_num_sms(self) -> int:
        return self.num_sms

    @staticmethod
    def _fingerprint(context_lens):
        """Two int32s that identify a context-lengths tensor (shape and values)."""
        rows, tokens = context_lens.shape
        flat = context_lens.reshape(-1).long()
        weighted = int((flat * torch.arange(1, flat.numel() + 1)).sum()) % (2**31 - 1)
        return torch.tensor([rows * 64 + tokens, weighted], dtype=torch.int32)

    def _schedule(self, context_lens, block_kv, num_sms):
        assert context_lens.dim() == 2 and context_lens.is_contiguous()
        assert block_kv == PAGE
        # The schedule's content names the lengths it was made from, so a
        # schedule refreshed in place (CUDA-graph replay) is checked by value.
        schedule = torch.zeros((num_sms + 1, 2), dtype=torch.int32)
        schedule[0] = self._fingerprint(context_lens)
        return schedule

    def _logits(
        self,
        q,
        kv_cache,
        weights,
        context_lens,
        block_table,
        schedule,
        max_context_len,
        clean_logits=False,
    ):
        rows, tokens, heads, dim = q.shape
        assert 1 <= tokens <= self.max_tokens_per_row, f"next_n={tokens} refused"
        assert context_lens.shape == (rows, tokens) and context_lens.is_contiguous()
        assert block_table.dim() == 2 and block_table.stride(1) == 1
        assert block_table.shape[0] == rows, (block_table.shape, rows)
        assert weights.shape == (rows * tokens, heads)
        assert kv_cache.shape[1:] == (PAGE, 1, dim + 4)
        assert schedule is not None, "no schedule for the paged MQA logits call"
        assert torch.equal(schedule[0], self._fingerprint(context_lens)), "schedule made from other context lengths"

        num_pages = kv_cache.shape[0]
        flat = kv_cache.view(num_pages, -1)
        values = flat[:, : PAGE * dim].view(torch.float8_e4m3fn).float()
        values = values.view(num_pages, PAGE, dim)
        scales = flat[:, PAGE * dim :].contiguous().view(torch.float32)
        out = torch.full((rows * tokens, max_context_len), float("nan"))
        for r in range(rows):
            n_kv = int(context_lens[r, -1])
            assert 0 <= n_kv <= max_context_len
            n_pages = math.ceil(n_kv / PAGE)
            pages = block_table[r, :n_pages].long()
            assert bool((pages >= 0).all()) and bool((pages < num_pages).all())
            k = (values[pages] * scales[pages].unsqueeze(-1)).reshape(-1, dim)[:n_kv]
            for i in range(tokens):
                score = torch.relu(q[r, i].float() @ k.T)  # [heads, n_kv]
                out[r * tokens + i, :n_kv] = (score * weights[r * tokens + i, :, None]).sum(0)
        return out


def _quantize_rows(x):
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4) / 448.0
    return (x / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def index_k_buffer(num_pages: int, seed: int = 0):
    """One layer's index-K cache, uint8 [pages, PAGE * (D + 4)]: per page the fp8 keys, then their float32 scales."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn((num_pages * PAGE, HEAD_DIM), generator=gen)
    k_fp8, k_scale = _quantize_rows(k)
    buf = torch.empty((num_pages, PAGE * (HEAD_DIM + 4)), dtype=torch.uint8)
    buf[:, : PAGE * HEAD_DIM] = k_fp8.view(torch.uint8).view(num_pages, -1)
    buf[:, PAGE * HEAD_DIM :] = k_scale.view(num_pages, PAGE).view(torch.uint8)
    return buf


def make_kv_pool_object(num_pages: int, seed: int = 0):
    """A real DSATokenToKVPool instance holding one layer's index-K buffer."""
    pool = object.__new__(memory_pool.DSATokenToKVPool)
    pool.page_size = PAGE
    pool.start_layer = 0
    pool.layer_transfer_counter = None
    pool.index_k_with_scale_buffer = [index_k_buffer(num_pages, seed)]
    pool.dtype = torch.float8_e4m3fn
    return pool


def make_backend(next_n: int, num_reqs: int = 16, seed: int = 0, kv_pool=make_kv_pool_object):
    """A DSA backend object for target_verify with next_n draft tokens; ``kv_pool(num_pages, seed=...)``
    makes its KV pool."""
    num_pages = 1 + num_reqs * (MAX_CONTEXT // PAGE)
    req_to_token = scattered_req_to_token(torch, num_reqs, MAX_CONTEXT, PAGE, seed)

    backend = object.__new__(backend_mod.DeepseekSparseAttnBackend)
    backend.device = torch.device("cpu")
    backend.real_page_size = PAGE
    backend.speculative_num_draft_tokens = next_n
    backend.speculative_num_steps = max(next_n - 1, 0)
    backend.speculative_step_id = 0
    backend.topk = 1
    backend.num_splits = 0
    backend.dsa_index_topk = INDEX_TOPK
    backend.max_context_len = MAX_CONTEXT
    backend.req_to_token_pool = types.SimpleNamespace(req_to_token=req_to_token)
    backend.req_to_token = req_to_token
    backend.token_to_kv_pool = kv_pool(num_pages, seed=seed + 1)
    backend.hisparse_coordinator = None
    backend.use_mha = False
    backend.dsa_prefill_impl = "flashmla_sparse"
    backend.dsa_decode_impl = "flashmla_sparse"
    backend.enable_auto_select_prefill_impl = False
    backend.dsa_kv_cache_store_fp8 = True
    backend.dsa_topk_backend = topk_mod.DSATopKBackend.TORCH
    backend._arange_buf = torch.arange(16384, dtype=torch.int32)
    return backend


def make_forward_batch(mode, seq_lens, next_n: int, host_lengths: bool = True):
    """The ForwardBatch fields the metadata and indexer paths read (``host_lengths=False``: no seq_lens_cpu)."""
    seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
    bs = seq_lens.numel()
    return types.SimpleNamespace(
        forward_mode=mode,
        batch_size=bs,
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone() if host_lengths else None,
        seq_lens_sum=int(seq_lens.sum()),
        req_pool_indices=torch.arange(1, bs + 1),
        extend_seq_lens_cpu=None,
        extend_seq_lens=None,
        extend_prefix_lens_cpu=None,
        global_num_tokens_cpu=None,
        spec_info=None,
        out_cache_loc=None,
    )


def install_kernels(monkeypatch, fake: FakeDeepGemm) -> None:
    """Route both modules' DeepGEMM calls to ``fake``; CUDA-only helpers to CPU."""
    monkeypatch.setattr(backend_mod, "deep_gemm", fake, raising=False)
    monkeypatch.setattr(backend_mod, "is_cuda", lambda: True)
    monkeypatch.setattr(backend_mod, "seqlens_expand_triton", seqlens_expand_cpu)
    monkeypatch.setattr(indexer_mod, "deep_gemm", fake, raising=False)
    monkeypatch.setattr(indexer_mod, "_is_cuda", True)
    monkeypatch.setattr(indexer_mod, "_is_hip", False)
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "0")  # plain-torch top-k


def make_indexer():
    indexer = object.__new__(indexer_mod.Indexer)
    indexer.index_topk = INDEX_TOPK
    indexer.sm_count = 132
    return indexer


def make_queries(num_tokens: int, seed: int = 0):
    """fp8 q [N, H, 128] and float32 weights [N, H, 1], as the indexer gets them."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn((num_tokens, NUM_HEADS, HEAD_DIM), generator=gen)
    q_fp8, q_scale = _quantize_rows(q)
    w = torch.randn((num_tokens, NUM_HEADS), generator=gen) * q_scale
    return q_fp8.contiguous(), w.unsqueeze(-1).contiguous()


def run_topk(backend, forward_batch, q_fp8, weights, metadata=None, indexer=None):
    """Call the real Indexer._get_topk_paged (of ``indexer``, default make_indexer()) under a real forward context."""
    if metadata is None:
        metadata = backend.get_indexer_metadata(0, forward_batch)
    indexer = make_indexer() if indexer is None else indexer
    ctx = fctx.ForwardContext(attn_backend=backend)
    with fctx.forward_context(ctx):
        return indexer._get_topk_paged(forward_batch, 0, q_fp8, weights, metadata)


def _apply_graph_metadata(backend, bs, seq_lens, req_pool_indices):
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    backend._apply_cuda_graph_metadata(
        bs=bs,
        req_pool_indices=req_pool_indices,
        seq_lens=lens,
        seq_lens_cpu=lens.clone(),
        forward_mode=ForwardMode.TARGET_VERIFY,
        spec_info=None,
    )


def capture_then_replay(backend, bs, replay_lens, max_bs, before_replay=None, pool=None, keep=()):
    """Capture TARGET_VERIFY metadata for ``bs`` requests (fill lengths of 1, graph state for ``max_bs``),
    run ``before_replay``, then replay it with ``replay_lens`` (request slots ``pool``, default 1..bs).

    Asserts the replay refreshed the captured metadata in place: the same object, its context lengths and
    schedule at the same addresses and shape, and the attributes named in ``keep`` as captured. Returns it.
    """
    backend.init_cuda_graph_state(max_bs=max_bs, max_num_tokens=max_bs * backend.speculative_num_draft_tokens)
    _apply_graph_metadata(backend, bs, [1] * bs, torch.arange(1, bs + 1))
    captured = backend.decode_cuda_graph_metadata[bs]

    def in_place_facts(meta):
        ctx = meta.paged_mqa_ctx_lens_2d
        kept = [getattr(meta, name) for name in keep]
        return ctx.data_ptr(), meta.paged_mqa_schedule_metadata.data_ptr(), tuple(ctx.shape), kept

    at_capture = in_place_facts(captured)
    if before_replay is not None:
        before_replay()
    _apply_graph_metadata(backend, bs, replay_lens, torch.arange(1, bs + 1) if pool is None else pool)
    meta = backend.forward_metadata
    assert meta is captured
    assert in_place_facts(meta) == at_capture
    return meta


def expected_token_lengths(seq_lens, next_n):
    """Keys each draft token sees: L - next_n + 1 + j with L = seq_len + next_n."""
    out = []
    for s in seq_lens:
        total = s + next_n
        out.extend(total - next_n + 1 + j for j in range(next_n))
    return out
