"""The indexer step's setting in one sglang tree: the tree imported, the calls observed, and the fixture.

The fixture is sglang's DSA test kit's mock model runner (real ``ReqToTokenPool`` and
``DSATokenToKVPool``) with a real ``DeepseekSparseAttnBackend`` per (next_n, forced per-token),
sglang's ``Indexer`` with the attributes its paged top-k reads, and the index-K cache written
through sglang's own store path. What differs between sglang releases comes from the tree's adapter
(bench/indexer/trees.py).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections import Counter
from pathlib import Path

from bench.indexer import trees

DEFAULT_TREE = trees.Tree("0.5.14")
FORCE_ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"
PAGE = 64
INDEX_HEAD_DIM = 128
INDEX_HEADS = 64  # DeepSeek-V3.2's indexer: 64 heads of 128
INDEX_TOPK = 2048  # DeepSeek-V3.2's index_topk
SCALE_FMT = "ue8m0"  # DeepSeek-V3.2's scale_fmt
FIXTURE_SEED = 1234
# How the fixture lays each request's whole pages over the pool: scattered at random, or in one run as a
# fresh engine's allocator leaves them (bench/paged_mqa_read_once.py's --pages names them alike).
PAGES = ("random", "contiguous")

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

    def __init__(self, tree: trees.Tree = DEFAULT_TREE):
        self.tree = tree
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
            elif name in self.tree.logits_outputs:  # a tree's helper around chunked kernel calls
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


class Fixture:
    def __init__(
        self,
        max_bs: int,
        max_ctx: int,
        next_ns,
        device: str,
        calls: Calls,
        seed: int = FIXTURE_SEED,
        decode_impl=None,
        tree: trees.Tree = DEFAULT_TREE,
        pages: str = "random",
    ):
        import torch
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.layers.attention.dsa import dsa_indexer
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.test.kits.attention_unittest.attention_methods import dsa_attention as kit

        self.torch = torch
        self.kit = kit
        self.act_quant = act_quant = tree.import_act_quant()
        self.ForwardMode = ForwardMode
        self.device = device
        self.calls = calls
        self.max_bs = max_bs
        self.max_ctx = max_ctx
        prefix_lens, extend_lens = (max_ctx - max(next_ns),) * max_bs, (max(next_ns),) * max_bs
        case = kit_case(kit, "sglpatch_indexer_target_verify", ForwardMode.TARGET_VERIFY, 16, prefix_lens, extend_lens)
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
        # The kit's config has one index head; the v0.5.23 line's backend asks DeepGEMM whether it takes
        # [B, next_n] rows for the model's heads, which must be those of the indexer below.
        config.hf_config.index_n_heads = INDEX_HEADS
        config.hf_config.index_head_dim = INDEX_HEAD_DIM
        self.runner = kit.DSAMockModelRunner(
            case=case,
            model_config=config,
            max_context_len=max_ctx,
            head_dim=head_dim,
            fp8_kv_cache=True,
            **graph_runner(torch, device, max_bs),
        )
        decode_impl = decode_impl or tree.decode_impl  # the indexer reads no FlashMLA metadata
        if decode_impl:  # CPU rehearsal only: FlashMLA's metadata needs sgl-kernel
            tree.set_decode_impl(self.runner, decode_impl)
        # One backend per (next_n, forced per-token): the layout is fixed when a CUDA-graph batch
        # size is first captured, so the two variants need their own graph metadata.
        self.backends = {}
        for n in next_ns:
            tree.set_draft_tokens(self.runner, n)
            for forced in (False, True):
                backend = ATTENTION_BACKENDS["dsa"](self.runner)
                backend.init_cuda_graph_state(max_bs, max_bs * n)
                self.backends[(n, forced)] = backend
        any_backend = self.backends[(next_ns[0], False)]
        self.pool = self.runner.token_to_kv_pool
        self.req_to_token = self.runner.req_to_token_pool.req_to_token

        self.indexer = make_indexer(dsa_indexer, INDEX_TOPK, device, tree)
        from sglang.srt.environ import envs

        # The fused PAGED top-k transform returns KV slots; the unfused top-k returns positions.
        self.topk_in_slots = bool(envs.SGLANG_DSA_FUSE_TOPK.get())

        # Whole pages per request (page 0 stays unused), and the inverse map slot -> position.
        n_pages = self.pool.get_index_k_with_scale_buffer(0).shape[0]
        assert n_pages >= max_bs * (max_ctx // PAGE) + 1, (n_pages, max_bs, max_ctx)
        self.pages = pages
        slots = fixture_slots(torch, max_bs, max_ctx, seed, pages).to(device)
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


def kit_case(kit, name: str, forward_mode, num_heads: int, prefix_lens: tuple, extend_lens: tuple | None = None):
    """A DSA case of sglang's test kit with one KV head on pages of ``PAGE`` tokens (extending by
    ``extend_lens`` where given, else by the kit's default)."""
    extend = {} if extend_lens is None else {"extend_lens": extend_lens}
    return kit.DSAAttentionCase(
        name=name,
        backend="dsa",
        forward_mode=forward_mode,
        num_heads=num_heads,
        num_kv_heads=1,
        page_size=PAGE,
        prefix_lens=prefix_lens,
        **extend,
    )


def graph_runner(torch, device, batch_size: int) -> dict:
    """How the kit's mock runner is built here: bf16, CUDA graphs on, captured for ``batch_size``."""
    return {"dtype": torch.bfloat16, "device": device, "disable_cuda_graph": False, "runner_batch_size": batch_size}


def fixture_slots(torch, max_bs: int, max_ctx: int, seed: int, pages: str = "random"):
    """[max_bs, max_ctx] KV slots of the fixture's requests: whole pages (page 0 unused), scattered over
    the pool at random, or ``pages="contiguous"``: request i's pages in one run, after request i-1's.

    They depend on the fixture's size and layout, and so do the keys written to them: two runs can
    compare their top-k (KV slots) only when their fixtures are alike (see FIXTURE_FILE)."""
    if pages not in PAGES:
        raise ValueError(f"pages is one of {PAGES}, not {pages!r}")
    pages_per_req = max_ctx // PAGE
    if pages == "contiguous":
        order = torch.arange(max_bs * pages_per_req) + 1
    else:
        order = torch.randperm(max_bs * pages_per_req, generator=torch.Generator().manual_seed(seed)) + 1
    return (order.view(max_bs, pages_per_req, 1) * PAGE + torch.arange(PAGE)).view(max_bs, max_ctx)


def make_indexer(dsa_indexer, index_topk: int, device, tree: trees.Tree = DEFAULT_TREE):
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
    tree.prepare_indexer(indexer)
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
