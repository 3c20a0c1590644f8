"""The paged-MQA layout sglang's DSA metadata names, as sglang's DSA kit builds it, and the layout due.

For every forward the DSA backend prepares, `MetadataLayoutRecorder` notes, without changing
what runs:
  * `field`:    the value of the metadata's layout field (`paged_mqa_layout`), where the tree has
                one (patch 1 adds it; pristine v0.5.14 has none);
  * `inferred`: the layout implied by the shape of the 2D context lengths the metadata hands to
                DeepGEMM's schedule (`paged_mqa_ctx_lens_2d`): [B*next_n, 1] per-token, [B, next_n]
                native, [B*next_n/2, 2] paired;
  * `schedule_ctx_lens_shapes`: the shapes DeepGEMM's schedule (get_paged_mqa_logits_metadata)
                was called with while the metadata was built.
These are the metadata's layouts: the kit never runs the indexer, so no paged-MQA kernel call is
seen. `allowed_layouts` is what the series permits, written out independently of the patched code.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os

# the series' switch that forces per-token whatever the GPU
FORCE_PER_TOKEN_ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"


def normalize_layout(value) -> str | None:
    """Map a layout value of any spelling (enum, str, int-backed enum) to per_token/native/paired."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        text = f"{value.name} {value.value}"
    else:
        text = str(value)
    t = text.lower().replace("-", "_")
    if "pair" in t and "tail" not in t:
        return "paired"
    if "native" in t or "2d" in t:
        return "native"
    if "token" in t or "1d" in t or "flat" in t:
        return "per_token"
    return f"unknown:{text}"


def infer_from_ctx_lens(ctx_lens, batch_size: int, next_n: int) -> str | None:
    if ctx_lens is None or not hasattr(ctx_lens, "shape") or ctx_lens.dim() != 2:
        return None
    rows, cols = tuple(ctx_lens.shape)
    if cols == 1:
        return "per_token"
    if next_n >= 2 and cols == next_n and rows == batch_size:
        return "native"
    if cols == 2 and next_n > 2 and next_n % 2 == 0 and rows * 2 == batch_size * next_n:
        return "paired"
    return f"unknown:{rows}x{cols}"


def _layout_fields(obj) -> dict:
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    else:
        names = list(getattr(obj, "__dict__", {}))
    return {n: getattr(obj, n, None) for n in names if "layout" in n.lower()}


class MetadataLayoutRecorder:
    """Wraps DeepseekSparseAttnBackend's metadata builders (init_forward_metadata and the CUDA-graph
    ones) and DeepGEMM's schedule call (get_paged_mqa_logits_metadata, made while building that
    metadata); every wrapper calls the original first and only reads afterwards. What it records
    is the layout the metadata names, not a kernel call: the DSA kit never runs the indexer."""

    def __init__(self):
        self.current: str | None = None
        self.records: dict[str, list[dict]] = {}
        self.schedule_calls: dict[str, list[list[int]]] = {}
        self.installed = False
        self.field_names: set[str] = set()

    def _note(self, backend, forward_mode, batch_size, where: str) -> None:
        if self.current is None:
            return
        try:
            md = getattr(backend, "forward_metadata", None)
            fields = _layout_fields(md)
            if (
                not fields
                and forward_mode is not None
                and (forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2())
            ):
                # the field may live on the indexer metadata only: build it (pure) to read it
                try:
                    fb = _FakeFB(forward_mode)
                    fields = _layout_fields(backend.get_indexer_metadata(0, fb))
                except Exception:
                    pass
            next_n = int(getattr(backend, "speculative_num_draft_tokens", 0) or 0)
            ctx = getattr(md, "paged_mqa_ctx_lens_2d", None)
            rec = {
                "where": where,
                "forward_mode": getattr(forward_mode, "name", str(forward_mode)),
                "batch_size": batch_size,
                "next_n": next_n,
                "field": {k: str(v) for k, v in fields.items()},
                "field_layout": next((normalize_layout(v) for v in fields.values()), None),
                "ctx_lens_2d_shape": list(ctx.shape) if hasattr(ctx, "shape") else None,
                "inferred": infer_from_ctx_lens(ctx, batch_size or 0, next_n),
            }
            self.field_names.update(fields)
            self.records.setdefault(self.current, []).append(rec)
        except Exception as exc:  # never disturb the test
            self.records.setdefault(self.current, []).append({"where": where, "error": repr(exc)})

    def install(self) -> None:
        if self.installed:
            return
        from sglang.srt.layers.attention import dsa_backend as mod

        cls = mod.DeepseekSparseAttnBackend
        rec = self

        def wrap(name, mode_of, bs_of):
            orig = getattr(cls, name, None)
            if orig is None:
                return

            @functools.wraps(orig)
            def wrapper(self, *a, **k):
                out = orig(self, *a, **k)
                try:
                    rec._note(self, mode_of(a, k), bs_of(a, k), name)
                except Exception:
                    pass
                return out

            setattr(cls, name, wrapper)

        def fb_mode(a, k):
            fb = a[0] if a else k.get("forward_batch")
            return getattr(fb, "forward_mode", None)

        def fb_bs(a, k):
            fb = a[0] if a else k.get("forward_batch")
            return getattr(fb, "batch_size", None)

        def kw(name, pos):
            return lambda a, k: k.get(name, a[pos] if len(a) > pos else None)

        wrap("init_forward_metadata", fb_mode, fb_bs)
        # CUDA-graph capture and replay share one body in v0.5.14:
        #   _apply_cuda_graph_metadata(bs, req_pool_indices, seq_lens, seq_lens_cpu, forward_mode, ...)
        wrap("_apply_cuda_graph_metadata", kw("forward_mode", 4), kw("bs", 0))
        #   init_forward_metadata_replay_cuda_graph_from_precomputed(bs, precomputed, forward_mode)
        wrap("init_forward_metadata_replay_cuda_graph_from_precomputed", kw("forward_mode", 2), kw("bs", 0))

        dg = getattr(mod, "deep_gemm", None)
        if dg is not None and hasattr(dg, "get_paged_mqa_logits_metadata"):
            orig_dg = dg.get_paged_mqa_logits_metadata

            @functools.wraps(orig_dg)
            def dg_wrapper(ctx_lens, *a, **k):
                if rec.current is not None and hasattr(ctx_lens, "shape"):
                    rec.schedule_calls.setdefault(rec.current, []).append(list(ctx_lens.shape))
                return orig_dg(ctx_lens, *a, **k)

            dg.get_paged_mqa_logits_metadata = dg_wrapper
        self.installed = True


class _FakeFB:
    def __init__(self, mode):
        self.forward_mode = mode


RECORDER = MetadataLayoutRecorder()


def sm90_rule_constants() -> dict:
    """The floor of the patched tree's SM90 row-width rule (fewest two-token rows, even next_n), under
    whichever name the tree gives it; {} without it."""
    try:
        from sglang.srt.layers.attention import dsa_backend
    except Exception:
        return {}
    names = {
        "min_paired_rows": ("SM90_PAGED_MQA_MIN_PAIRED_ROWS", "_SM90_PAGED_MQA_MIN_PAIRED_ROWS"),
    }
    found = {}
    for key, candidates in names.items():
        for name in candidates:
            if hasattr(dsa_backend, name):
                found[key] = int(getattr(dsa_backend, name))
    return found


def allowed_layouts(next_n: int, sm_major: int, tree: str) -> set[str] | None:
    """The layouts the series permits for a TARGET_VERIFY batch, written out independently of the
    patched code: SM100 -> native for next_n >= 2 (as upstream); SM90 -> per-token for odd next_n,
    and for even next_n per-token, or native for next_n == 2 and paired for next_n >= 4 (which of the
    two depends on the batch size and the block table's width, a rule the CPU tests check against
    the H200 grids); the force-per-token switch wins. Pristine: native on SM100, per-token on SM90. None: no
    rule asserted (no tree, other GPUs)."""
    if tree == "none":
        return None
    if next_n < 2:
        return {"per_token"}
    if tree == "patched" and os.environ.get(FORCE_PER_TOKEN_ENV, "").lower() in ("1", "true", "yes"):
        return {"per_token"}
    if sm_major == 10:
        return {"native"}
    if sm_major == 9:
        if tree == "pristine":
            return {"per_token"}
        if next_n % 2:
            return {"per_token"}
        return {"per_token", "native" if next_n == 2 else "paired"}
    return None
