#!/usr/bin/env python3
"""The DSA indexer step of a TARGET_VERIFY forward, on a GPU, through sglang's own code.

One process imports one sglang tree (patched or pristine; ``--tree``) and, for every case of
a grid (next_n x batch size x context x uniform/ragged lengths), runs the paged indexer step
of a TARGET_VERIFY forward the way the model does, with nothing re-implemented:

- a real ``DeepseekSparseAttnBackend``, made by sglang's attention registry from the mock
  model runner of sglang's own DSA test kit (real ``ReqToTokenPool`` and ``DSATokenToKVPool``);
- the index-K cache written through ``Indexer._store_index_k_cache`` (sglang's fused fp8
  store kernel, or its ``act_quant`` + ``set_index_k_scale_buffer`` fallback);
- queries quantised with sglang's ``act_quant`` (DSA triton kernel), head weights scaled as
  the indexer scales them;
- eager: ``init_forward_metadata`` then ``get_indexer_metadata`` and
  ``Indexer._get_topk_paged`` (DeepGEMM ``fp8_paged_mqa_logits`` + the metadata's
  ``topk_transform``, sgl-kernel's fused top-k transform);
- CUDA graph: ``init_cuda_graph_state``, ``init_forward_metadata_out_graph(in_capture=True)``
  at capture with one set of lengths, the step captured in a ``torch.cuda.CUDAGraph``, then
  ``init_forward_metadata_out_graph`` with NEW lengths (the replay path) and ``replay()``.

Each case runs twice on a patched tree: with the layout the backend chooses, and with
``SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1`` (per-token, upstream's SM90 path), in both eager
and CUDA-graph mode.  A pristine tree runs per-token only and can dump its top-k
(``--dump-topk DIR``) for a patched run to compare against (``--compare-topk DIR``).

Top-k rows are compared as sets.  Where two sets differ, every differing entry's logit (from
the per-token kernel's own logits of that row) must equal the row's k-th largest logit: that
is a tie at the boundary, counted and reported, never hidden; anything else is a mismatch.

Timing (CUDA-graph mode): the captured indexer step (logits + top-k transform) replayed
``--reps`` x ``--iters`` times, median per step, per-token vs chosen layout in the same
process.  Every function and kernel counted in ``exercised`` was observed to run (call counts
from pass-through wrappers that only count), not just named.

    python bench/indexer_step.py --tree PATCHED/ --grid full --json out.json --compare-topk DIR
    python bench/indexer_step.py --tree PRISTINE/ --label pristine --grid full --dump-topk DIR
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
try:  # as bench.indexer_step (tests) or as a script (bench/ first on the path)
    from bench import indexer_trees
except ImportError:
    import indexer_trees

# What differs per sglang release (bench/indexer_trees.py); run() picks the tree's adapter.
TREE = indexer_trees.Tree("0.5.14")
FORCE_ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"
PAGE = 64
INDEX_HEAD_DIM = 128
INDEX_HEADS = 64  # DeepSeek-V3.2's indexer: 64 heads of 128
INDEX_TOPK = 2048  # DeepSeek-V3.2's index_topk
SCALE_FMT = "ue8m0"  # DeepSeek-V3.2's scale_fmt

GRIDS = {
    "full": dict(
        next_ns=(2, 3, 4),
        batch_sizes=(1, 4, 8, 32, 64, 128),
        ctxs=(4096, 16384, 65536),
        lengths=("uniform", "ragged"),
    ),
    "smoke": dict(next_ns=(2, 3, 4), batch_sizes=(1, 8, 32), ctxs=(4096, 65536), lengths=("uniform", "ragged")),
    "tiny": dict(next_ns=(2, 4), batch_sizes=(1, 8), ctxs=(4096,), lengths=("ragged",)),
    # the large cases alone (next_n 2/3/4 at 32 and 128 requests, 16k and 64k): a short GPU call
    "large": dict(next_ns=(2, 3, 4), batch_sizes=(32, 128), ctxs=(16384, 65536), lengths=("uniform", "ragged")),
    # issue 22's hold-out grid for the SM90 row-width rule: measured after the rule was fixed, never
    # used to set it (its batch sizes and contexts are none of the committed grids')
    "holdout": dict(
        next_ns=(2, 3, 4, 5, 6),
        batch_sizes=(2, 6, 12, 16, 24, 48, 96),
        ctxs=(2048, 8192, 32768, 131072),
        lengths=("uniform", "ragged"),
    ),
    # issue 23's cases: next_n 3 and 5 (one token per row in this series) where servers run them, and 6
    # (three pairs)
    "odd": dict(next_ns=(3, 5, 6), batch_sizes=(32, 64, 128), ctxs=(16384, 65536), lengths=("uniform", "ragged")),
    # cases a pristine tree runs too, for top-k identity across trees (a subset of "holdout")
    "identity": dict(next_ns=(2, 3, 4, 5, 6), batch_sizes=(16, 48), ctxs=(8192,), lengths=("ragged",)),
}
# Logits computed in another fp32 summation order are not bit-identical; a top-k entry swapped
# within this relative distance of the row's k-th logit is a near-tie, counted apart from exact ties.
NEAR_TIE_REL = 1e-5
# A pristine run's top-k dump (--dump-topk) holds the fixture it was taken on; a patched run compares
# with it only on a fixture of the same size (the KV slots and the keys follow the size).
FIXTURE_FILE = "fixture.json"
FIXTURE_SEED = 1234
NO_SLOT_TO_SWAP = "no slot to swap in"
MODES = {"both": (False, True), "eager": (False,), "graph": (True,)}

# What the run observes being called: "<module>:<qualname>" -> how it is wrapped.  Names that a
# tree lacks (a patch renamed or removed them) are skipped and listed under "not_present".
WATCH = (
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend.__init__",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend.init_forward_metadata",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend.init_cuda_graph_state",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend.init_forward_metadata_out_graph",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._build_forward_metadata_cuda_graph",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._apply_cuda_graph_metadata",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._build_paged_mqa_schedule_2d_ctx_lens",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._select_paged_mqa_layout",
    "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend.get_indexer_metadata",
    "sglang.srt.layers.attention.dsa_backend:select_paged_mqa_layout",
    "sglang.srt.layers.attention.dsa_backend:_sm90_paged_mqa_layout",
    "sglang.srt.layers.attention.dsa_backend:pick_sm90_tokens_per_row",
    "sglang.srt.layers.attention.dsa_backend:DSAIndexerMetadata.topk_transform",
    "sglang.srt.layers.attention.dsa.dsa_indexer:Indexer._get_topk_paged",
    "sglang.srt.layers.attention.dsa.dsa_indexer:Indexer._store_index_k_cache",
    "sglang.srt.layers.attention.dsa.dsa_indexer:_paged_mqa_call_layout",
    "sglang.srt.layers.attention.dsa.dsa_indexer:select_paged_mqa_layout",
    "sglang.srt.layers.attention.dsa.dsa_indexer:fused_store_index_k_cache",
    "sglang.srt.layers.attention.dsa.dsa_topk_backend:DSATopKBackend.topk_transform",
    "sglang.srt.layers.attention.dsa.triton_kernel:act_quant",
    "sglang.srt.mem_cache.memory_pool:DSATokenToKVPool.get_index_k_with_scale_buffer",
    "sglang.srt.mem_cache.memory_pool:DSATokenToKVPool.set_index_k_scale_buffer",
    "deep_gemm:fp8_paged_mqa_logits",
    "deep_gemm:get_paged_mqa_logits_metadata",
    "sgl_kernel:fast_topk_transform_fused",
    "sgl_kernel:fast_topk_v2",
)


# --------------------------------------------------------------------------------------------
# sglang tree and call observation
# --------------------------------------------------------------------------------------------
def select_tree(tree: Path):
    """Put ``tree`` (a folder holding ``sglang/``) first on sys.path; import sglang from it."""
    tree = tree.resolve()
    if not (tree / "sglang" / "__init__.py").is_file():
        raise SystemExit(f"no sglang package under {tree}")
    sys.path.insert(0, str(tree))
    import sglang

    origin = Path(sglang.__file__).resolve()
    if tree not in origin.parents:
        raise SystemExit(f"`import sglang` resolved to {origin}, not under {tree}")
    return sglang


class Calls:
    """Pass-through wrappers that count calls and keep the last kernel inputs/outputs."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.present: list[str] = []
        self.missing: list[str] = []
        self.logits_calls: list[dict] = []  # fp8_paged_mqa_logits: q/ctx shapes per call
        self.last_logits = None

    def install(self, names=WATCH):
        for name in names:
            mod_name, qual = name.split(":")
            try:
                mod = importlib.import_module(mod_name)
            except ImportError:
                self.missing.append(name)
                continue
            owner, attr = mod, qual
            if "." in qual:
                cls_name, attr = qual.split(".")
                owner = getattr(mod, cls_name, None)
            orig = getattr(owner, attr, None) if owner is not None else None
            if orig is None or (owner is not mod and attr not in vars(owner)):
                self.missing.append(name)
                continue
            wrapped = self._wrap(name, orig)
            if owner is not mod and isinstance(vars(owner)[attr], staticmethod):
                wrapped = staticmethod(wrapped)
            setattr(owner, attr, wrapped)
            self.present.append(name)

    def _wrap(self, name, orig):
        is_logits = name == "deep_gemm:fp8_paged_mqa_logits"

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            self.counts[name] += 1
            out = orig(*args, **kwargs)
            if is_logits:
                q, ctx = args[0], args[3]
                self.logits_calls.append(dict(q=list(q.shape), ctx=list(ctx.shape)))
                self.last_logits = out
            elif name in TREE.logits_outputs:  # a tree's helper around chunked kernel calls
                self.last_logits = out
            return out

        return wrapper

    def exercised(self):
        out = []
        for name in self.present:
            if self.counts[name]:
                mod, qual = name.split(":")
                out.append(dict(name=f"{mod}.{qual}", calls=self.counts[name]))
        return out


# --------------------------------------------------------------------------------------------
# the fixture: sglang's DSA kit mock runner, a real backend per (next_n, forced), the K cache
# --------------------------------------------------------------------------------------------
class Fixture:
    def __init__(
        self, max_bs: int, max_ctx: int, next_ns, device: str, calls: Calls, seed: int = FIXTURE_SEED, decode_impl=None
    ):
        import torch
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.layers.attention.dsa import dsa_indexer
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.test.kits.attention_unittest.attention_methods import dsa_attention as kit

        self.torch = torch
        self.kit = kit
        self.act_quant = act_quant = TREE.import_act_quant()
        self.ForwardMode = ForwardMode
        self.device = device
        self.calls = calls
        self.max_bs = max_bs
        self.max_ctx = max_ctx
        case = kit.DSAAttentionCase(
            name="sglpatch_indexer_target_verify",
            backend="dsa",
            forward_mode=ForwardMode.TARGET_VERIFY,
            num_heads=16,
            num_kv_heads=1,
            page_size=PAGE,
            prefix_lens=(max_ctx - max(next_ns),) * max_bs,
            extend_lens=(max(next_ns),) * max_bs,
        )
        head_dim = kit.DSA_SPARSE_QK_NOPE_HEAD_DIM + kit.DSA_SPARSE_QK_ROPE_HEAD_DIM
        config = kit.TinyDSAModelConfig(
            num_heads=case.num_heads,
            num_kv_heads=1,
            head_dim=head_dim,
            hidden_size=64,
            context_len=max_ctx,
            qk_nope_head_dim=kit.DSA_SPARSE_QK_NOPE_HEAD_DIM,
            qk_rope_head_dim=kit.DSA_SPARSE_QK_ROPE_HEAD_DIM,
            kv_lora_rank=kit.DSA_SPARSE_QK_NOPE_HEAD_DIM,
            index_topk=INDEX_TOPK,
        )
        self.runner = kit.DSAMockModelRunner(
            case=case,
            model_config=config,
            dtype=torch.bfloat16,
            device=device,
            max_context_len=max_ctx,
            head_dim=head_dim,
            disable_cuda_graph=False,
            runner_batch_size=max_bs,
            fp8_kv_cache=True,
        )
        decode_impl = decode_impl or TREE.decode_impl  # the indexer reads no FlashMLA metadata
        if decode_impl:  # CPU rehearsal only: FlashMLA's metadata needs sgl-kernel
            TREE.set_decode_impl(self.runner, decode_impl)
        # One backend per (next_n, forced per-token): the layout is fixed when a CUDA-graph batch
        # size is first captured, so the two variants need their own graph metadata.
        self.backends = {}
        for n in next_ns:
            TREE.set_draft_tokens(self.runner, n)
            for forced in (False, True):
                backend = ATTENTION_BACKENDS["dsa"](self.runner)
                backend.init_cuda_graph_state(max_bs, max_bs * n)
                self.backends[(n, forced)] = backend
        any_backend = self.backends[(next_ns[0], False)]
        self.pool = self.runner.token_to_kv_pool
        self.req_to_token = self.runner.req_to_token_pool.req_to_token

        self.indexer = make_indexer(dsa_indexer, INDEX_TOPK, device)
        from sglang.srt.environ import envs

        # The fused PAGED top-k transform returns KV slots; the unfused top-k returns positions.
        self.topk_in_slots = bool(envs.SGLANG_DSA_FUSE_TOPK.get())

        # Scattered whole pages per request (page 0 stays unused), and the inverse map slot -> position.
        n_pages = self.pool.get_index_k_with_scale_buffer(0).shape[0]
        assert n_pages >= max_bs * (max_ctx // PAGE) + 1, (n_pages, max_bs, max_ctx)
        slots = fixture_slots(torch, max_bs, max_ctx, seed).to(device)
        self.req_to_token[:max_bs, :max_ctx] = slots.to(self.req_to_token.dtype)
        self.slot_pos = torch.full((n_pages * PAGE,), -1, dtype=torch.int64, device=device)
        self.slot_pos[slots.reshape(-1).long()] = torch.arange(max_ctx, device=device).repeat(max_bs)
        self.entry_pos = self.slot_pos if self.topk_in_slots else None

        # Index-K cache for every slot in use, written by sglang's own store path (bf16 keys in).
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        kgen = torch.Generator(device=device).manual_seed(seed + 1)
        flat = slots.reshape(-1).to(torch.int64)
        chunk = 1 << 20
        with forward_context(ForwardContext(attn_backend=any_backend)):
            for start in range(0, flat.numel(), chunk):
                loc = flat[start : start + chunk].contiguous()
                key = torch.randn((loc.numel(), INDEX_HEAD_DIM), generator=kgen, device=device, dtype=torch.bfloat16)
                self.indexer._store_index_k_cache(None, 0, key, act_quant=act_quant, out_cache_loc=loc)
        _sync(torch, device)

    # ---- batches ----------------------------------------------------------------------------
    def forward_batch(self, lengths, next_n):
        """A TARGET_VERIFY ForwardBatch: KV lengths include the next_n draft tokens."""
        torch = self.torch
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        bs = len(lengths)
        seq = torch.tensor([L - next_n for L in lengths], dtype=torch.int64)
        slots = self.req_to_token[:bs]
        out_loc = torch.cat([slots[i, L - next_n : L] for i, L in enumerate(lengths)]).to(
            device=self.device, dtype=torch.int64
        )
        positions = torch.cat([torch.arange(L - next_n, L) for L in lengths]).to(self.device)
        return ForwardBatch(
            forward_mode=self.ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=torch.zeros(bs * next_n, dtype=torch.int64, device=self.device),
            req_pool_indices=torch.arange(bs, dtype=torch.int64, device=self.device),
            seq_lens=seq.to(self.device),
            seq_lens_cpu=seq.clone(),
            out_cache_loc=out_loc,
            seq_lens_sum=int(seq.sum()),
            positions=positions,
        )

    def queries(self, n_tokens, seed):
        """fp8 q [N, 64, 128] by sglang's act_quant, weights [N, 64, 1] scaled like the indexer's."""
        return random_queries(self.torch, self.act_quant, n_tokens, seed, self.device)

    def step(self, backend, fb, q_fp8, weights):
        """The paged indexer step the model runs per layer: metadata -> logits -> top-k."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        with forward_context(ForwardContext(attn_backend=backend)):
            md = backend.get_indexer_metadata(0, fb)
            return self.indexer._get_topk_paged(fb, 0, q_fp8, weights, md)


def fixture_slots(torch, max_bs: int, max_ctx: int, seed: int):
    """[max_bs, max_ctx] KV slots of the fixture's requests: whole pages, scattered (page 0 unused).

    They depend on the fixture's size, and so do the keys written to them: two runs can compare
    their top-k (KV slots) only when their fixtures are the same size (see FIXTURE_FILE)."""
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = max_ctx // PAGE
    perm = torch.randperm(max_bs * pages_per_req, generator=gen) + 1
    return (perm.view(max_bs, pages_per_req, 1) * PAGE + torch.arange(PAGE)).view(max_bs, max_ctx)


def make_indexer(dsa_indexer, index_topk: int, device):
    """sglang's Indexer with the attributes _get_topk_paged and _store_index_k_cache read.

    Its projection weights (wq_b, wk, weights_proj), k_norm and RoPE are not built: the step
    under test starts from fp8 q, head weights and the index-K cache.
    """
    import torch

    indexer = object.__new__(dsa_indexer.Indexer)
    torch.nn.Module.__init__(indexer)
    indexer.index_topk = index_topk
    indexer.n_heads = INDEX_HEADS
    indexer.head_dim = INDEX_HEAD_DIM
    indexer.block_size = 128
    indexer.scale_fmt = SCALE_FMT
    indexer.softmax_scale = INDEX_HEAD_DIM**-0.5
    indexer.sm_count = _num_sms(torch, device)
    indexer.logits_with_pp_recv = False
    TREE.prepare_indexer(indexer)
    return indexer


def random_queries(torch, act_quant, n_tokens, seed, device, softmax_scale=INDEX_HEAD_DIM**-0.5):
    """fp8 q [N, 64, 128] by sglang's act_quant, weights [N, 64, 1] scaled like the indexer's."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn((n_tokens, INDEX_HEADS, INDEX_HEAD_DIM), generator=gen, device=device)
    q_fp8, q_scale = act_quant(q.to(torch.bfloat16).contiguous(), 128, SCALE_FMT)
    w = torch.randn((n_tokens, INDEX_HEADS), generator=gen, device=device) * INDEX_HEADS**-0.5
    weights = w.unsqueeze(-1) * q_scale.view(n_tokens, INDEX_HEADS, 1) * softmax_scale
    return q_fp8.contiguous(), weights.float().contiguous()


def _num_sms(torch, device):
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def _sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


@contextlib.contextmanager
def forced_per_token(on: bool):
    old = os.environ.get(FORCE_ENV)
    if on:
        os.environ[FORCE_ENV] = "1"
    else:
        os.environ.pop(FORCE_ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FORCE_ENV, None)
        else:
            os.environ[FORCE_ENV] = old


def make_lengths(kind: str, bs: int, ctx: int, next_n: int):
    if kind == "uniform":
        return [ctx] * bs
    rng = random.Random(f"ragged-{bs}-{ctx}")
    lengths = [rng.randint(max(next_n + 1, ctx // 16), ctx) for _ in range(bs)]
    lengths[0] = ctx
    if bs > 1:
        lengths[1] = min(ctx, 1000 + next_n)  # below index_topk: rows padded with -1
    return lengths


def capture_lengths(lengths, next_n):
    """Other lengths for the capture, so the replay sees new ones."""
    return [max(next_n + 1, L // 2 + 7) for L in lengths]


def layout_of(backend, next_n):
    """The layout the metadata names (patched), else the one its 2D context lengths imply."""
    md = backend.forward_metadata
    field = getattr(md, "paged_mqa_layout", None)
    if field is not None:
        return str(getattr(field, "value", field))
    ctx = getattr(md, "paged_mqa_ctx_lens_2d", None)
    if ctx is None:
        return "unknown"
    rows, cols = ctx.shape
    if cols == 1:
        return "per_token"
    if cols == next_n:
        return "native"
    return "paired" if cols == 2 and next_n % 2 == 0 else f"unknown ({rows} x {cols})"


class CapturedStep:
    """``fn`` captured in a CUDA graph (after a side-stream warm-up); ``out`` is its static output."""

    def __init__(self, torch, fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = fn()

    def replay(self):
        self.graph.replay()


# --------------------------------------------------------------------------------------------
# top-k comparison with ties explained
# --------------------------------------------------------------------------------------------
def to_positions(torch, slot_pos, entries):
    """Top-k entries -> key positions: slots (fused PAGED transform) map through slot_pos;
    ``slot_pos=None`` means the entries already are positions (unfused top-k)."""
    t = torch.as_tensor(entries, dtype=torch.int64)
    if slot_pos is None:
        return t
    return slot_pos[t.to(slot_pos.device)]


def compare_topk(torch, ref, got, logits, slot_pos, next_n, lengths, got_logits=None):
    """Compare two top-k results row by row, as sets.

    A differing row is
    - a tie when every differing entry's logit (under ``logits``, the reference's) equals the
      row's k-th largest kept logit;
    - explained by the top-k kernel when the reference result is not an exact top-k of its own
      logits, and the other side's logits (``got_logits``, when given) are bit-identical to the
      reference's on that row: the inputs agree and the top-k kernel itself did not return the
      exact top-k (there is then no single right answer to be identical to);
    - a mismatch otherwise.
    Returns dict(rows, identical_rows, tie_rows, explained_rows, mismatch_rows, first_mismatch,
    explained)."""
    a = torch.sort(ref, dim=-1).values
    b = torch.sort(got, dim=-1).values
    same = (a == b).all(dim=-1)
    res = dict(
        rows=int(ref.shape[0]),
        identical_rows=int(same.sum()),
        tie_rows=0,
        near_tie_rows=0,
        explained_rows=0,
        mismatch_rows=0,
        first_mismatch=None,
        explained=[],
    )
    bad = torch.nonzero(~same).flatten().tolist()
    for row in bad:
        ra, rb = set(a[row].tolist()), set(b[row].tolist())
        diff = (ra ^ rb) - {-1}
        if logits is None or -1 in (ra ^ rb):
            res["mismatch_rows"] += 1
            res["first_mismatch"] = res["first_mismatch"] or dict(
                row=row, diff=len(diff), reason="no logits or padding"
            )
            continue
        valid = lengths[row // next_n] - next_n + 1 + row % next_n
        kept = [s for s in ra if s >= 0]
        pos_kept = to_positions(torch, slot_pos, kept).to(logits.device)
        boundary = logits[row, pos_kept].min().item()
        pos_diff = to_positions(torch, slot_pos, sorted(diff)).to(logits.device)
        if bool((pos_diff < 0).any()) or bool((pos_diff >= valid).any()):
            res["mismatch_rows"] += 1
            res["first_mismatch"] = res["first_mismatch"] or dict(row=row, diff=len(diff), reason="slot outside row")
            continue
        vals = logits[row, pos_diff]
        if bool((vals == boundary).all()):
            res["tie_rows"] += 1
            continue
        same_logits = None
        if got_logits is not None:
            same_logits = torch.equal(logits[row, :valid], got_logits[row, :valid])
        tol = NEAR_TIE_REL * max(1.0, abs(boundary))
        if same_logits is False and bool(((vals - boundary).abs() <= tol).all()):
            res["near_tie_rows"] += 1
            continue
        ref_exact = exact_topk(torch, ref[row], logits[row], slot_pos, valid)
        got_exact = exact_topk(torch, got[row], logits[row], slot_pos, valid)
        evidence = dict(
            row=row,
            differing_entries=len(diff),
            reference_exact_topk=ref_exact,
            other_exact_topk=got_exact,
            logits_bit_identical=same_logits,
        )
        # Only when the reference itself is not an exact top-k of its own logits: a correct
        # reference that the other side misses is a mismatch, whatever the reason.
        if not ref_exact and same_logits is not False:
            res["explained_rows"] += 1
            res["explained"].append(evidence)
        else:
            res["mismatch_rows"] += 1
            evidence.update(boundary=boundary, values=vals[:8].tolist())
            res["first_mismatch"] = res["first_mismatch"] or evidence
    return res


def logits_bit_identical(torch, a, b, next_n, lengths):
    """Are two [tokens, width] logits tensors bit-identical on every position a token may see?"""
    if a is None or b is None:
        return None
    valid = torch.tensor(
        [L - next_n + 1 + j for L in lengths for j in range(next_n)], device=a.device, dtype=torch.int64
    )
    width = min(a.shape[1], b.shape[1])
    mask = torch.arange(width, device=a.device)[None, :] < valid[:, None]
    return bool(((a[:, :width] == b[:, :width]) | ~mask).all())


def same_sets_rows(torch, x, y):
    """How many rows of two top-k results differ as sets."""
    return int((torch.sort(x, dim=-1).values != torch.sort(y, dim=-1).values).any(dim=-1).sum())


def sensitivity_check(torch, ref, slot_pos, next_n, lengths):
    """The comparison must catch a changed top-k: swap one kept index of row 0 for a slot of the
    same request that the row did not keep, and expect a mismatch (not a tie, not equal)."""
    topk = ref["topk"]
    row = topk[0]
    kept = set(row.tolist())
    valid = lengths[0] - next_n + 1
    if slot_pos is None:  # entries are positions
        own = list(range(valid))
    else:  # entries are slots: request 0's pages, as row 0 kept them
        own = ref_slots(torch, slot_pos, topk, 0)
    pos = to_positions(torch, slot_pos, own).tolist() if own else []
    candidates = [s for s, p in zip(own, pos, strict=True) if s not in kept and 0 <= p < valid]
    if not candidates or (row < 0).all():
        return dict(detected=False, reason=NO_SLOT_TO_SWAP)
    bad = topk.clone()
    j = int(torch.nonzero(row >= 0)[0])
    bad[0, j] = candidates[0]
    res = compare_topk(torch, topk, bad, ref["logits"], slot_pos, next_n, lengths)
    return dict(detected=res["mismatch_rows"] == 1 and res["tie_rows"] == 0, result=res)


def ref_slots(torch, slot_pos, topk, row):
    """Slots of the request that ``row`` belongs to: those whose kept entries share its pages."""
    pages = set((topk[row][topk[row] >= 0] // PAGE).tolist())
    return [p * PAGE + o for p in sorted(pages) for o in range(PAGE)]


def exact_topk(torch, entries, logits_row, slot_pos, valid):
    """Is ``entries`` an exact top-k of logits_row[:valid] (ties at the boundary allowed)?"""
    kept = [e for e in entries.tolist() if e >= 0]
    if not kept:
        return valid == 0
    vals = logits_row[:valid]
    k = len(kept)
    kth = torch.topk(vals, k).values[-1]
    pos = to_positions(torch, slot_pos, kept).to(vals.device)
    if bool((pos < 0).any()) or bool((pos >= valid).any()):
        return False
    mask = torch.zeros(valid, dtype=torch.bool, device=vals.device)
    mask[pos] = True
    return bool((vals[mask] >= kth).all()) and bool((vals[~mask] <= kth).all())


def graph_vs_eager(torch, refs, slot_pos, next_n, lengths):
    """Per-token top-k: CUDA graph vs eager, with which side is an exact top-k of its own logits
    for every row where they differ, and how far the two logits rows are apart there."""
    e, g = refs["eager"], refs["graph"]
    res = compare_topk(torch, e["topk"], g["topk"], e["logits"], slot_pos, next_n, lengths, got_logits=g["logits"])
    a = torch.sort(e["topk"], dim=-1).values
    b = torch.sort(g["topk"], dim=-1).values
    rows = torch.nonzero(~(a == b).all(dim=-1)).flatten().tolist()
    detail = []
    for row in rows[:8]:
        valid = lengths[row // next_n] - next_n + 1 + row % next_n
        d = dict(row=row, valid=valid)
        d["eager_exact"] = exact_topk(torch, e["topk"][row], e["logits"][row], slot_pos, valid)
        if g["logits"] is not None:
            d["graph_exact"] = exact_topk(torch, g["topk"][row], g["logits"][row], slot_pos, valid)
            d["logits_max_abs_diff"] = float((e["logits"][row, :valid] - g["logits"][row, :valid]).abs().max())
        detail.append(d)
    res["rows_detail"] = detail
    return res


def merge_cmp(items):
    keys = ("rows", "identical_rows", "tie_rows", "near_tie_rows", "explained_rows", "mismatch_rows")
    out = {k: 0 for k in keys}
    out["first_mismatch"] = None
    for it in items:
        for k in keys:
            out[k] += it[k]
        out["first_mismatch"] = out["first_mismatch"] or it["first_mismatch"]
    return out


# --------------------------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------------------------
def time_fn(torch, fn, iters, reps):
    """Median microseconds per call of fn (a graph replay or an eager step)."""
    return time_interleaved(torch, [fn], iters, reps)[0]


def time_interleaved(torch, fns, iters, reps):
    """Median microseconds per call of each fn, their samples taken in turn (a, b, a, b, ...) so
    that clock or thermal drift during the run falls on all of them alike."""
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, samples, strict=True):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1000.0 / iters)
    return [statistics.median(s) for s in samples]


def eager_variant(fx, next_n, lengths, forced, seed, keep_logits=False):
    """Top-k, layout and logits of one eager step for one variant (forced per-token or chosen)."""
    backend = fx.backends[(next_n, forced)]
    with forced_per_token(forced):
        q_fp8, weights = fx.queries(len(lengths) * next_n, seed)
        first_call = len(fx.calls.logits_calls)
        fb = fx.forward_batch(lengths, next_n)
        backend.init_forward_metadata(fb)
        layout = layout_of(backend, next_n)
        topk = fx.step(backend, fb, q_fp8, weights).clone()
        logits = fx.calls.last_logits if keep_logits else None
        kernel_q = [c["q"] for c in fx.calls.logits_calls[first_call:]]
    return dict(
        topk=topk,
        layout=layout,
        logits=logits,
        kernel_q=kernel_q[-1] if kernel_q else None,
        run=(lambda: fx.step(backend, fb, q_fp8, weights)),
    )


class GraphVariant:
    """One variant's indexer step captured in a CUDA graph with other lengths (the backend's capture
    path), then replayed with the case's own (its replay path). Kept alive for interleaved timing."""

    def __init__(self, fx, next_n, lengths, forced, seed):
        torch = fx.torch
        backend = fx.backends[(next_n, forced)]
        with forced_per_token(forced):
            q_fp8, weights = fx.queries(len(lengths) * next_n, seed)
            first_call = len(fx.calls.logits_calls)
            fb_cap = fx.forward_batch(capture_lengths(lengths, next_n), next_n)
            backend.init_forward_metadata_out_graph(fb_cap, in_capture=True)
            self.q_static, self.w_static = torch.zeros_like(q_fp8), torch.zeros_like(weights)
            self.step = CapturedStep(torch, lambda: fx.step(backend, fb_cap, self.q_static, self.w_static))
            self.graph_logits = fx.calls.last_logits  # the captured kernel's output buffer
            fb = fx.forward_batch(lengths, next_n)
            backend.init_forward_metadata_out_graph(fb)
            self.layout = layout_of(backend, next_n)
            self.q_static.copy_(q_fp8)
            self.w_static.copy_(weights)
            self.step.replay()
            _sync(torch, fx.device)
            self.topk = self.step.out.clone()
            self.logits = None if self.graph_logits is None else self.graph_logits.clone()
            self.unstable_rows = 0  # the same replay again: the same top-k every time?
            for _ in range(2):
                self.step.replay()
                _sync(torch, fx.device)
                self.unstable_rows = max(self.unstable_rows, same_sets_rows(torch, self.step.out, self.topk))
            kernel_q = [c["q"] for c in fx.calls.logits_calls[first_call:]]
            self.kernel_q = kernel_q[-1] if kernel_q else None
            self.block_table_width = backend.forward_metadata.real_page_table.shape[1] * PAGE

    def replay(self):
        self.step.replay()


def fixture_size(cases):
    """(requests, tokens per request) of a fixture that holds every case."""
    return max(c[1] for c in cases), max(c[2] for c in cases)


def fixture_doc(max_bs, max_ctx):
    return dict(max_bs=max_bs, max_ctx=max_ctx, seed=FIXTURE_SEED, page=PAGE)


def check_same_fixture(compare: Path, max_bs: int, max_ctx: int) -> None:
    """Top-k saved in ``compare`` are KV slots of its run's fixture: refuse a fixture of another size."""
    saved = compare / FIXTURE_FILE
    if not saved.is_file():
        refuse(f"{compare}: no {FIXTURE_FILE}, so its top-k cannot be matched to this run's fixture")
    theirs = json.loads(saved.read_text())
    ours = fixture_doc(max_bs, max_ctx)
    if theirs != ours:
        refuse(
            f"{compare} was dumped with a fixture of {theirs.get('max_bs')} x {theirs.get('max_ctx')} "
            f"(seed {theirs.get('seed')}), this run's is {max_bs} x {max_ctx} (seed {FIXTURE_SEED}): "
            "their KV slots differ; give both runs the same --fixture-grid"
        )


def known_grids(spec: str) -> list[str]:
    names = spec.split(",")
    unknown = [n for n in names if n not in GRIDS]
    if unknown:
        raise SystemExit(f"unknown grid(s) {unknown}; the grids are {sorted(GRIDS)}")
    return names


def refuse(msg: str):
    print(f"[indexer-step] {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def fmt_case(case):
    return "n={} B={} ctx={} {}".format(*case)


def case_seed(next_n, bs, ctx, kind):
    return (next_n * 1_000_003 + bs * 10_007 + ctx * 31 + (1 if kind == "ragged" else 0)) % (2**31)


def grid_cases(names):
    """(next_n, bs, ctx, lengths kind) -> the grids it belongs to, in the grids' order, each case once."""
    cases: dict[tuple, list[str]] = {}
    for name in names:
        g = GRIDS[name]
        for case in itertools.product(g["next_ns"], g["batch_sizes"], g["ctxs"], g["lengths"]):
            cases.setdefault(case, []).append(name)
    return cases


def estimate_s(cases, modes, iters, reps, patched):
    """Seconds the timed replays of ``cases`` take on an H200: a step of the per-token layout costs
    about 8 us plus 3.75e-5 us per (token, key) of the batch (the committed v0.5.14 full grid: 952 us
    at 128 x 3 x 64k, 12 us at 1 x 2 x 4k); each timed variant replays (3 + reps * iters) times, plus
    about 0.15 s per variant for capture, replay checks and comparison."""
    total = 0.0
    variants = 2 if patched else 1
    for next_n, bs, ctx, kind in cases:
        keys = ctx if kind == "uniform" else ctx * 17 // 32  # ragged: uniform in [ctx/16, ctx]
        step_s = (8 + 3.75e-5 * bs * next_n * keys) * 1e-6
        for graph in modes:
            timed = (3 + reps * iters) * step_s if graph else 0.0
            total += variants * (timed + 0.15)
    return total


def run_case(fx, case, grids, graph, args, pristine, patched):
    """One row: the forced per-token variant, the chosen one (patched trees), compared."""
    torch = fx.torch
    next_n, bs, ctx, kind = case
    lengths = make_lengths(kind, bs, ctx, next_n)
    seed = case_seed(*case)
    timing = args.device.startswith("cuda") and (graph or args.time_eager)
    if graph:
        pt = GraphVariant(fx, next_n, lengths, True, seed)
        ch = GraphVariant(fx, next_n, lengths, False, seed) if patched else pt
        us = time_interleaved(torch, [pt.replay, ch.replay], args.iters, args.reps) if timing else [None, None]
        refs = dict(per_token=dict(topk=pt.topk, logits=pt.logits), chosen=dict(topk=ch.topk, logits=ch.logits))
        rerun_diff = pt.unstable_rows
        unstable = dict(per_token=pt.unstable_rows, chosen=ch.unstable_rows)
        layouts, kernel_q = (pt.layout, ch.layout), (pt.kernel_q, ch.kernel_q)
        width = pt.block_table_width
    else:
        pt = eager_variant(fx, next_n, lengths, True, seed, keep_logits=True)
        ch = eager_variant(fx, next_n, lengths, False, seed, keep_logits=True) if patched else pt
        us = [None, None]
        if timing:
            us = time_interleaved(torch, [pt["run"], ch["run"]], args.iters, args.reps)
        refs = dict(per_token=pt, chosen=ch)
        again = eager_variant(fx, next_n, lengths, True, seed)  # the per-token path against itself
        rerun_diff = same_sets_rows(torch, pt["topk"], again["topk"])
        unstable = None
        layouts, kernel_q = (pt["layout"], ch["layout"]), (pt["kernel_q"], ch["kernel_q"])
        width = max(lengths)
    ref, got = refs["per_token"], refs["chosen"]
    cmp_args = (ref["logits"], fx.entry_pos, next_n, lengths)
    cmp = dict(chosen=compare_topk(torch, ref["topk"], got["topk"], *cmp_args, got_logits=got["logits"]))
    if pristine is not None:
        cmp["pristine"] = compare_topk(torch, ref["topk"], pristine.to(ref["topk"].device), *cmp_args)
    total = merge_cmp(cmp.values())
    row = dict(
        next_n=next_n,
        batch_size=bs,
        ctx=ctx,
        lengths=kind,
        cuda_graph=graph,
        layout=layouts[1],
        topk_identical=total["mismatch_rows"] == 0 and total["explained_rows"] == 0 and total["near_tie_rows"] == 0,
        topk_equivalent=total["mismatch_rows"] == 0,
        logits_bit_identical=(
            logits_bit_identical(torch, ref["logits"], got["logits"], next_n, lengths) if patched else None
        ),
        per_token_us=_r(us[0]),
        chosen_us=_r(us[1]),
        speedup=_r(us[0] / us[1], 3) if us[0] and us[1] else None,
        per_token_layout=layouts[0],
        kernel_q_chosen=kernel_q[1],
        kernel_q_per_token=kernel_q[0],
        compared_with=["per_token"] + sorted(cmp),
        tie_rows={k: v["tie_rows"] for k, v in cmp.items()},
        near_tie_rows={k: v["near_tie_rows"] for k, v in cmp.items()},
        mismatch_rows={k: v["mismatch_rows"] for k, v in cmp.items()},
        explained_rows={k: v["explained_rows"] for k, v in cmp.items()},
        per_token_rerun_diff_rows=rerun_diff,
        topk_rows=total["rows"] // len(cmp),
        replay_unstable_rows=unstable,
        kv_lengths=lengths if kind == "ragged" and bs <= 8 else None,
        grids=grids,
        block_table_width=width,
        timing_interleaved=bool(timing),
    )
    if total["first_mismatch"]:
        row["first_mismatch"] = total["first_mismatch"]
    explained = [dict(e, against=k) for k, v in cmp.items() for e in v["explained"]]
    if explained:
        row["explained"] = explained[:8]
    return row, ref


def run(args):
    global TREE
    cases = grid_cases(known_grids(args.grid))
    sized_for = grid_cases(known_grids(args.fixture_grid)) if args.fixture_grid else {}
    max_bs, max_ctx = fixture_size([*cases, *sized_for])
    modes = MODES[args.modes]
    patched = args.label != "pristine"
    estimate = estimate_s(cases, modes, args.iters, args.reps, patched)
    log(f"{len(cases)} cases x {len(modes)} mode(s) ({args.grid}); about {estimate:.0f} s of timed replays on an H200")
    log(f"fixture: {max_bs} requests x {max_ctx} tokens")
    if args.plan:
        return 0
    compare = Path(args.compare_topk) if args.compare_topk else None
    if compare:
        check_same_fixture(compare, max_bs, max_ctx)
    select_tree(Path(args.tree))
    TREE = indexer_trees.for_tree(Path(args.tree))
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    calls = Calls()
    calls.install(WATCH + TREE.extra_watch)
    next_ns = tuple(sorted({c[0] for c in cases}))
    t0 = time.time()
    fx = Fixture(max_bs, max_ctx, next_ns, args.device, calls, seed=FIXTURE_SEED)
    log(f"fixture ready in {time.time() - t0:.1f} s (pool for {max_bs} x {max_ctx} tokens)")
    dump = Path(args.dump_topk) if args.dump_topk else None
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / FIXTURE_FILE).write_text(json.dumps(fixture_doc(max_bs, max_ctx)) + "\n")
    rows, all_ok, self_check = [], True, None
    for case, grids in cases.items():
        key = "n{}_b{}_c{}_{}".format(*case)
        dumped = torch.load(compare / f"{key}.pt") if compare and (compare / f"{key}.pt").is_file() else {}
        saved, refs = {}, {}
        for graph in modes:
            mode = "graph" if graph else "eager"
            row, ref = run_case(fx, case, grids, graph, args, dumped.get(mode), patched)
            refs[mode] = ref
            if self_check is None or self_check.get("reason") == NO_SLOT_TO_SWAP:
                # a case whose rows keep every key has nothing to swap in: try the next one
                self_check = sensitivity_check(
                    torch, ref, fx.entry_pos, case[0], make_lengths(case[3], *case[1:3], case[0])
                )
                if self_check.get("reason") != NO_SLOT_TO_SWAP:
                    log(f"comparison self-check ({fmt_case(case)}): {self_check}")
            if graph and "eager" in refs:
                lengths = make_lengths(case[3], case[1], case[2], case[0])
                row["graph_vs_eager_per_token"] = graph_vs_eager(torch, refs, fx.entry_pos, case[0], lengths)
            all_ok &= row["topk_equivalent"]
            saved[mode] = ref["topk"].cpu()
            rows.append(row)
            log(fmt_row(row))
        if dump:  # every tree saves its per-token top-k
            torch.save(saved, dump / f"{key}.pt")
        del refs
        fx.calls.last_logits = None
        if args.json:
            write_json(args, rows, calls, torch, t0, self_check, partial=True, fixture=(max_bs, max_ctx))
    write_json(args, rows, calls, torch, t0, self_check, partial=False, fixture=(max_bs, max_ctx))
    print_table(rows)
    if self_check and self_check.get("reason") == NO_SLOT_TO_SWAP:
        log("the comparison self-check found no case with a key left out of its top-k to swap in")
        all_ok = False
    elif not (self_check and self_check["detected"]):
        log("the comparison self-check did not detect a perturbed top-k row")
        all_ok = False
    if not all_ok:
        log("TOP-K MISMATCH not explained by the top-k kernel (see mismatch_rows / first_mismatch)")
    return 0 if all_ok else 1


def _r(x, nd=1):
    return None if x is None else round(x, nd)


def fmt_row(r):
    t = ""
    if r["per_token_us"] is not None:
        t = f" per-token {r['per_token_us']:8.1f} us  chosen {r['chosen_us']:8.1f} us  x{r['speedup']:.3f}"
    ties = sum(r["tie_rows"].values())
    expl = sum(r["explained_rows"].values())
    if expl:
        t += f"  explained by the top-k kernel: {expl} rows"
    gve = r.get("graph_vs_eager_per_token")
    if gve:
        t += f"  graph-vs-eager per-token: {gve['mismatch_rows']} rows differ, {gve['tie_rows']} tie rows"
    return (
        f"n={r['next_n']} B={r['batch_size']:3d} ctx={r['ctx']:5d} {r['lengths']:7s} "
        f"{'graph' if r['cuda_graph'] else 'eager'} {r['layout']:9s} q={r['kernel_q_chosen']} "
        f"identical={r['topk_identical']} equivalent={r['topk_equivalent']} logits_same={r['logits_bit_identical']} "
        f"ties={ties} rerun_diff={r['per_token_rerun_diff_rows']}{t}"
    )


def print_table(rows):
    print("\n| next_n | B | ctx | lengths | mode | layout | top-k identical | per-token us | chosen us | speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['next_n']} | {r['batch_size']} | {r['ctx']} | {r['lengths']} | "
            f"{'graph' if r['cuda_graph'] else 'eager'} | {r['layout']} | {r['topk_identical']} | "
            f"{r['per_token_us']} | {r['chosen_us']} | {r['speedup']} |"
        )


def write_json(args, rows, calls, torch, t0, self_check, partial, fixture=None):
    if not args.json:
        return
    import sglang

    try:
        import deep_gemm

        dg = getattr(deep_gemm, "__version__", None) or _dist_version("sgl-deep-gemm")
    except ImportError:
        dg = None
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    cap = list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
    doc = dict(
        device=dev,
        compute_capability=cap,
        sglang=TREE.release,
        sglang_version_attr=getattr(sglang, "__version__", None),
        tree_adapter=TREE.describe(),
        sgl_kernel=_dist_version("sglang-kernel") or _dist_version("sgl-kernel"),
        env={k: os.environ[k] for k in sorted(os.environ) if k.startswith(("SGLANG_", "SGL_"))},
        tree=args.label,
        tree_path=str(Path(args.tree).resolve()),
        deep_gemm=dg,
        torch=torch.__version__,
        command=args.command or " ".join([Path(sys.executable).name] + sys.argv),
        grid=args.grid,
        modes=args.modes,
        fixture=dict(max_bs=fixture[0], max_ctx=fixture[1]) if fixture else None,
        index=dict(heads=INDEX_HEADS, head_dim=INDEX_HEAD_DIM, topk=INDEX_TOPK, page=PAGE, scale_fmt=SCALE_FMT),
        timing=dict(iters=args.iters, reps=args.reps, statistic="median us per indexer step"),
        exercised=[e["name"] for e in calls.exercised()],
        exercised_calls=calls.exercised(),
        watched_but_not_present=calls.missing,
        not_exercised=NOT_EXERCISED,
        comparison_self_check=self_check,
        partial=partial,
        elapsed_s=round(time.time() - t0, 1),
        rows=rows,
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(args.json) + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.json)


NOT_EXERCISED = [
    "Indexer.forward_cuda (wq_b/wk/weights_proj projections, k_norm, RoPE, Hadamard rotate_activation): "
    "q, head weights and keys are random; q goes through act_quant, keys through _store_index_k_cache",
    "the DSA sparse attention (FlashMLA) that consumes the top-k",
    "the model's CUDA-graph runner (DecodeCudaGraphRunner for TARGET_VERIFY): the graph is captured here "
    "around the indexer step alone, with the backend's own capture/replay metadata calls",
    "more than one layer, tensor/data parallelism, padded (dp-attention) batches",
]


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def log(msg):
    print(f"[indexer-step] {msg}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tree",
        default=str(REPO / "build" / "sglang" / "python"),
        help="folder that holds sglang/ (default: make apply's)",
    )
    ap.add_argument("--label", default="patched", choices=("patched", "pristine"))
    ap.add_argument("--grid", default="full", help=f"one grid or several, comma-separated: {', '.join(GRIDS)}")
    ap.add_argument("--modes", default="both", choices=sorted(MODES), help="eager steps, CUDA-graph replays or both")
    ap.add_argument("--plan", action="store_true", help="print the cases and the time estimate only (no GPU)")
    ap.add_argument("--json", help="write the results here (rewritten after every case)")
    ap.add_argument("--dump-topk", help="save this tree's top-k per case here (pristine run)")
    ap.add_argument("--compare-topk", help="compare against top-k saved here by a pristine run")
    ap.add_argument(
        "--fixture-grid",
        help="size the fixture for these grids too (comma-separated), e.g. a pristine run whose "
        "dump a run of larger grids compares with",
    )
    ap.add_argument("--iters", type=int, default=20, help="graph replays per timing sample")
    ap.add_argument("--reps", type=int, default=5, help="timing samples (median reported)")
    ap.add_argument("--time-eager", action="store_true", help="also time the eager step (host overhead included)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--command", help="the command line to record in the JSON")
    args = ap.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
