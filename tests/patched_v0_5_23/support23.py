"""Builders for the v0.5.23 SM90 paged-MQA tests, on real sglang 0.5.23 code.

- ``make_backend``: a real ``DeepseekSparseAttnBackend`` made with
  ``object.__new__`` and given the attributes its TARGET_VERIFY metadata
  paths read (page size 64, a token table of scattered whole pages, a KV pool
  holding one layer's fp8 index-K buffer).
- ``FakeDeepGemm`` (tests/patched/p12_support.py's recording stand-in for
  ``get_paged_mqa_logits_metadata`` / ``fp8_paged_mqa_logits``, reused): it
  applies DeepGEMM's host checks (at most ``max_tokens_per_row`` query tokens
  per row, context lengths shaped like q's first two dims, one block-table
  row per kernel row, a schedule made from exactly those context lengths,
  checked by value) and computes the logits in plain torch.
- ``use_kernels``: routes dsa_backend's and dsa_indexer's DeepGEMM entry
  points (0.5.23 reaches them through ``resolve_*`` helpers) to the stand-in,
  and the CUDA-only triton length expansion to plain torch. The backend's
  probe of whether SM90 DeepGEMM takes [B, next_n] rows (patch 0002) asks a
  stand-in of its own with the same limit, so the calls a test counts are the
  indexer's.
- ``platform``: sglang's own ``override_platform`` for SM100 / SM90 / other
  CUDA, plus the module-level ``is_cuda`` answers the code under test reads.
"""

from __future__ import annotations

import contextlib
import types

import harness23
import torch

harness23.require()  # a missing or wrong tree fails here, with the reason

import p12_support  # noqa: E402  (the 0.5.14 harness's builders and DeepGEMM stand-in)
from cpu_sglang import import_sglang, seqlens_expand_cpu  # noqa: E402
from p12_support import (  # noqa: E402
    HEAD_DIM,
    INDEX_TOPK,
    NUM_HEADS,
    PAGE,
    FakeDeepGemm,
    capture_then_replay,
    expected_token_lengths,
    make_forward_batch,
    make_queries,
)

backend_mod = import_sglang("sglang.srt.layers.attention.dsa_backend")
indexer_mod = import_sglang("sglang.srt.layers.attention.dsa.dsa_indexer")
topk_mod = import_sglang("sglang.srt.layers.attention.dsa.dsa_topk_backend")
fbi = import_sglang("sglang.srt.model_executor.forward_batch_info")
runtime_context = import_sglang("sglang.srt.runtime_context")

__all__ = [
    "FakeDeepGemm",
    "capture_then_replay",
    "make_forward_batch",
    "make_queries",
    "HEAD_DIM",
    "INDEX_TOPK",
    "NUM_HEADS",
    "PAGE",
]

ForwardMode = fbi.ForwardMode
MAX_CONTEXT = 1024
FORCE_ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"

ARCHES = {
    # name: platform facts
    "sm100": dict(is_sm100=True, is_sm90=False),
    "sm90": dict(is_sm100=False, is_sm90=True),
    "sm80": dict(is_sm100=False, is_sm90=False),
}
# Query tokens per row each arch's DeepGEMM accepts.
KERNEL_TOKENS_PER_ROW = {"sm90": 2, "sm100": 8, "sm80": 1}


@contextlib.contextmanager
def platform(monkeypatch, arch: str):
    """One GPU of ``arch``, one rank: sglang's platform and parallel overrides."""
    monkeypatch.setattr(backend_mod, "is_cuda", lambda: True)
    monkeypatch.setattr(indexer_mod, "_is_cuda", True)
    monkeypatch.setattr(indexer_mod, "_is_hip", False)
    with (
        runtime_context.override_platform(is_cuda=True, **ARCHES[arch]),
        runtime_context.get_parallel().override(attn_cp_size=1, dcp_enabled=False),
    ):
        yield


def cuda_only(name: str):
    """A CUDA-only kernel entry point: raises, as it would without a GPU."""

    def _raise(*args, **kwargs):
        raise RuntimeError(f"{name} is CUDA-only (CPU test)")

    return _raise


def use_kernels(monkeypatch, fake: FakeDeepGemm) -> FakeDeepGemm:
    """Route the DeepGEMM calls to ``fake``; returns the stand-in the backend's probe asks (fake's limit)."""
    probed = FakeDeepGemm(max_tokens_per_row=fake.max_tokens_per_row, num_sms=fake.num_sms)

    def probe_fns():
        return probed.fp8_paged_mqa_logits, probed.get_paged_mqa_logits_metadata, probed.num_sms

    monkeypatch.setattr(backend_mod, "_deep_gemm_paged_mqa_fns", probe_fns, raising=False)  # absent before 0002
    for mod in (backend_mod, indexer_mod):
        monkeypatch.setattr(mod, "resolve_paged_mqa_logits_metadata_fn", lambda: fake.get_paged_mqa_logits_metadata)
        monkeypatch.setattr(mod, "resolve_num_sms", fake.get_num_sms)
    monkeypatch.setattr(indexer_mod, "resolve_fp8_paged_mqa_logits_fn", lambda: fake.fp8_paged_mqa_logits)
    monkeypatch.setattr(backend_mod, "seqlens_expand_triton", seqlens_expand_cpu)
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "0")  # plain-torch top-k
    return probed


class IndexKPool:
    """The KV pool surface _get_topk_paged reads: one layer's fp8 index-K pages."""

    def __init__(self, num_pages: int, seed: int = 0):
        self.buffer = p12_support.index_k_buffer(num_pages, seed)
        self.page_size = PAGE
        self.index_page_size = PAGE
        self.dtype = torch.float8_e4m3fn

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor:
        assert layer_id == 0
        return self.buffer


class FusedVerifyMetadata:
    """Plain-torch stand-in for the CUDA-only fused_dsa_target_verify_metadata.

    Writes what the triton kernel writes on graph replay (per-request and
    per-token lengths, page tables, and, when given, the SM100 [bs, next_n]
    context lengths) and records the ``paged_mqa_ctx_lens_2d`` it was handed.
    """

    def __init__(self):
        self.ctx_lens_args = []

    def __call__(
        self,
        *,
        seq_lens,
        req_pool_indices,
        req_to_token,
        cache_seqlens,
        cu_seqlens_k,
        page_table_1,
        seqlens_expanded,
        dsa_cache_seqlens,
        dsa_cu_seqlens_k,
        real_page_table,
        bs,
        max_seqlen_k,
        dsa_index_topk,
        physical_page_size,
        next_n,
        paged_mqa_ctx_lens_2d=None,
    ):
        self.ctx_lens_args.append(paged_mqa_ctx_lens_2d)
        lens = (seq_lens[:bs] + next_n).to(torch.int32)
        cache_seqlens[:bs].copy_(lens)
        cu_seqlens_k[0] = 0
        cu_seqlens_k[1 : bs + 1].copy_(torch.cumsum(lens, 0))
        rows = torch.repeat_interleave(req_to_token[req_pool_indices[:bs], :max_seqlen_k], next_n, dim=0)
        page_table_1[: bs * next_n, :max_seqlen_k].copy_(rows)
        expanded = torch.tensor(expected_token_lengths((lens - next_n).tolist(), next_n), dtype=torch.int32)
        seqlens_expanded[: bs * next_n].copy_(expanded)
        clipped = expanded.clamp(max=dsa_index_topk)
        dsa_cache_seqlens[: bs * next_n].copy_(clipped)
        dsa_cu_seqlens_k[0] = 0
        dsa_cu_seqlens_k[1 : bs * next_n + 1].copy_(torch.cumsum(clipped, 0))
        real = rows[:, ::physical_page_size] // physical_page_size
        real_page_table[: bs * next_n, : real.shape[1]].copy_(real)
        if paged_mqa_ctx_lens_2d is not None:
            paged_mqa_ctx_lens_2d.copy_(lens.view(-1, 1).expand(-1, next_n))


class TopKV2:
    """Stand-in for 0.5.23's default PAGED top-k, the JIT ``topk_transform_paged_v2``
    (CUDA-only), and its ``plan_topk_v2``.

    Models what sglang relies on: scores row ``i`` is transformed through page-table
    row ``i`` (``real_page_table`` has one row per scores row), each of its top-k
    positions ``p`` (all positions when the row is shorter) becoming the slot
    ``page_table[i, p // page_size] * page_size + p % page_size``, padded with -1;
    the plan is built per forward from the same lengths (its shape is checked).
    """

    def __init__(self):
        self.calls = []

    def plan_topk_v2(self, seq_lens, static_threshold=-1, *, out=None):
        plan = torch.zeros((seq_lens.shape[0] + 1, 2), dtype=torch.int32)
        plan[:-1, 0] = seq_lens.to(torch.int32)
        return plan

    def topk_transform_paged_v2(self, scores, seq_lens, page_tables, out_page_indices, page_size, metadata):
        rows, topk = out_page_indices.shape
        assert page_tables.shape[0] == rows == seq_lens.shape[0] == scores.shape[0]
        assert metadata.shape[0] == rows + 1 and torch.equal(metadata[:-1, 0], seq_lens.to(torch.int32))
        self.calls.append(dict(rows=rows))
        out_page_indices.fill_(-1)
        for i in range(rows):
            n = int(seq_lens[i])
            pos = torch.arange(n) if n <= topk else scores[i, :n].topk(topk).indices
            slots = page_tables[i, pos // page_size].long() * page_size + pos % page_size
            out_page_indices[i, : pos.numel()] = slots.to(torch.int32)

    def install(self, monkeypatch) -> None:
        topk_v2 = import_sglang("sglang.kernels.ops.attention.dsv4.topk")
        monkeypatch.setattr(topk_v2, "plan_topk_v2", self.plan_topk_v2)
        monkeypatch.setattr(topk_v2, "topk_transform_paged_v2", self.topk_transform_paged_v2)
        monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "1")
        monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1")


def make_backend(next_n: int, num_reqs: int = 16, seed: int = 0):
    """A DSA backend object for target_verify with next_n draft tokens: p12_support's, with an IndexKPool
    and the attributes 0.5.23's metadata paths read besides."""
    backend = p12_support.make_backend(next_n, num_reqs, seed, kv_pool=IndexKPool)
    backend.physical_page_size = PAGE
    backend.dsa_index_kpool = 1
    backend.dsa_index_n_heads = NUM_HEADS
    backend.dsa_index_head_dim = HEAD_DIM
    backend._kv_shard_pool = None
    backend.dcp_size, backend.dcp_rank = 1, 0
    backend.use_fused_topk = False
    backend.dsa_drop_wide_page_table = False
    backend.experimental_kpool_metadata_fusion = False
    backend.device_capability = (0, 0)
    backend.device_sm_major = 0
    backend._is_in_breakable_cuda_graph = lambda: False
    backend._is_in_tc_piecewise_cuda_graph = lambda: False
    backend._get_device_sm = lambda: 90
    backend._is_blackwell = lambda: False
    backend.supports_mha_one_shot = False
    backend._memory_saver_adapter = types.SimpleNamespace(region=lambda tag: contextlib.nullcontext())
    backend._multi_ctas_kv_counter_buffer = None
    backend._fused_verify_metadata = FusedVerifyMetadata()
    return backend


def make_indexer():
    indexer = p12_support.make_indexer()
    indexer.n_heads = NUM_HEADS
    indexer.num_init_tokens = 0
    indexer.num_local_tokens = 0
    indexer.paged_mqa_logits_backend = import_sglang(
        "sglang.srt.layers.attention.dsa.paged_mqa_logits_backend"
    ).DSAPagedMQALogitsBackend.DEEPGEMM
    return indexer


def run_topk(backend, forward_batch, q_fp8, weights, metadata=None):
    """Call the real Indexer._get_topk_paged (0.5.23's attributes) under a real forward context."""
    return p12_support.run_topk(backend, forward_batch, q_fp8, weights, metadata, indexer=make_indexer())
