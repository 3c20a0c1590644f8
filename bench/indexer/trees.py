"""Per-release adapters for bench/indexer_step.py: what differs between the sglang trees it drives.

bench/indexer_step.py runs the same indexer step (real ``DeepseekSparseAttnBackend`` from the
DSA test kit's mock runner, ``Indexer._store_index_k_cache``, ``get_indexer_metadata``,
``Indexer._get_topk_paged``) on every series line's base.  Where sglang's internals moved
between releases, the driver asks the adapter of the tree it imported (``for_tree``) instead
of carrying a copy per release:

- where ``act_quant`` lives (0.5.14: the DSA triton kernel module; 0.5.23: ``sglang.kernels``);
- how the draft-token count (``speculative_num_draft_tokens``) and the decode impl reach a new
  backend: 0.5.14 reads ``model_runner.server_args``; 0.5.23 reads the runtime context's
  resolved config (``get_spec()`` / ``get_exec()``), changed through
  ``get_context().override(...)``, sglang's own API for that;
- the extra attributes ``Indexer._get_topk_paged`` reads on 0.5.23 (the paged-MQA logits
  backend resolved by sglang's own ``DSAPagedMQALogitsBackend.resolve``, the init/local token
  masks, the logits budget cache);
- which functions the run watches on top of the shared list (0.5.23's names for the row
  width choice, the replay refresh, and its top-k paths);
- what the installed DeepGEMM answered to the tree's probe of ``[B, next_n]`` rows (the v0.5.23
  line's patch 2, ``sm90_paged_mqa_takes_next_n_rows``), where the tree has it.

Nothing here re-implements sglang code: every adapter either names a function to import or
sets a value through sglang's own API.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path


def tree_version(tree: Path) -> str:
    """The sglang version of a folder holding ``sglang/`` (its wheel's ``sglang/_version.py``);
    "unknown" when that names none."""
    for name in ("_version.py",):
        f = Path(tree) / "sglang" / name
        if f.is_file():
            m = re.search(r"""__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", f.read_text())
            if m:
                return m.group(1)
    return "unknown"


class Tree:
    """sglang 0.5.14 (and any tree without a more specific adapter)."""

    release = "0.5.14"
    # The DSA decode impl the kit's mock runner is switched to (None: the kit's own choice).
    decode_impl: str | None = None
    act_quant = "sglang.srt.layers.attention.dsa.triton_kernel:act_quant"
    extra_watch: tuple[str, ...] = ()
    # Watched functions whose return value is the step's whole logits (taken over the last
    # kernel call's output, which is one chunk when the tree splits the rows over calls).
    logits_outputs: tuple[str, ...] = ()
    # Read from the patched tree's source: does it carry the line's patch?
    patch_marks = {"srt/layers/attention/dsa_backend.py": "paged_mqa_layout"}

    def __init__(self, version: str):
        self.version = version
        self.notes: list[str] = []
        if self.decode_impl:
            self.notes.append(f"dsa_decode_backend={self.decode_impl} (see bench/indexer/trees.py)")

    def import_act_quant(self):
        mod, name = self.act_quant.split(":")
        return getattr(importlib.import_module(mod), name)

    def set_draft_tokens(self, runner, n: int) -> None:
        runner.server_args.speculative_num_draft_tokens = n

    def set_decode_impl(self, runner, impl: str) -> None:
        runner.server_args.dsa_decode_backend = impl

    def prepare_indexer(self, indexer) -> None:
        """Attributes the tree's ``_get_topk_paged`` reads beyond the shared ones."""

    def next_n_rows_probe(self, backends: dict) -> dict | None:
        """What DeepGEMM answered to the tree's probe of [B, next_n] rows; None: the tree has no probe."""
        return None

    def is_patched(self, tree: Path) -> bool:
        root = Path(tree) / "sglang"
        return all(mark in (root / f).read_text() for f, mark in self.patch_marks.items())

    def describe(self) -> dict:
        return dict(release=self.release, adapter=type(self).__name__, notes=list(self.notes))


class Tree0523(Tree):
    """sglang 0.5.23: the v0.5.23 series line's base."""

    release = "0.5.23"
    # The kit's default decode impl, flashmla_kv, makes init_cuda_graph_state build FlashMLA's
    # tile-scheduler metadata through the separate `flash_mla` package (sgl-flash-mla, pinned
    # with torch 2.14 and not on the GPU box).  That metadata feeds the sparse attention after
    # the top-k, which this step does not run; flashmla_sparse builds none.
    decode_impl = "flashmla_sparse"
    act_quant = "sglang.kernels.ops.quantization.act_quant_triton:act_quant"
    extra_watch = (
        # the patch: row width per batch, its SM90 rule, the captured width at replay
        "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._paged_mqa_tokens_per_row",
        "sglang.srt.layers.attention.dsa_backend:pick_sm90_paged_mqa_tokens_per_row",
        "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._captured_paged_mqa_tokens_per_row",
        # patch 2's probe, by the name the backend calls it
        "sglang.srt.layers.attention.dsa_backend:sm90_paged_mqa_takes_next_n_rows",
        # 0.5.23's replay refreshes and the indexer's DeepGEMM helpers
        "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._refresh_paged_mqa_schedule_metadata",
        "sglang.srt.layers.attention.dsa_backend:DeepseekSparseAttnBackend._refresh_topk_v2_plan",
        "sglang.srt.layers.attention.dsa.dsa_indexer:deepgemm_paged_mqa_logits_native",
        "sglang.srt.layers.attention.dsa.dsa_indexer:deepgemm_paged_mqa_logits_split",
        # the top-k paths 0.5.23 picks between (SGLANG_OPT_USE_TOPK_V2: sglang's JIT v2 kernel,
        # else sgl-kernel's fast_topk_transform_fused, watched in the shared list)
        "sglang.srt.layers.attention.dsa.dsa_topk_backend:_topk_transform_v2_paged",
        "sglang.kernels.ops.attention.dsv4.topk:topk_transform_paged_v2",
        "sglang.kernels.ops.attention.dsv4.topk:plan_topk_v2",
        "sglang.kernels.ops.quantization.act_quant_triton:act_quant",
    )
    # Pristine 0.5.23's _get_topk_paged runs DeepGEMM in chunks of at most num_sms rows (per-token
    # B * next_n > 132 on an H200) and concatenates them inside these helpers; the series' first
    # patch makes one call on SM90.
    logits_outputs = (
        "sglang.srt.layers.attention.dsa.dsa_indexer:deepgemm_paged_mqa_logits_native",
        "sglang.srt.layers.attention.dsa.dsa_indexer:deepgemm_paged_mqa_logits_split",
    )
    patch_marks = {
        "srt/layers/attention/dsa_backend.py": "pick_sm90_paged_mqa_tokens_per_row",
        "srt/environ.py": "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN",
    }

    def _override(self, **fields) -> None:
        from sglang.srt.runtime_context import get_context

        get_context().override("sglpatch bench/indexer_step.py", **fields)

    def set_draft_tokens(self, runner, n: int) -> None:
        # DeepseekSparseAttnBackend.__init__ reads get_spec().speculative_num_draft_tokens
        self._override(speculative_num_draft_tokens=n)
        from sglang.srt.runtime_context import get_spec

        assert get_spec().speculative_num_draft_tokens == n

    def set_decode_impl(self, runner, impl: str) -> None:
        self._override(dsa_decode_backend=impl)

    def prepare_indexer(self, indexer) -> None:
        from sglang.srt.layers.attention.dsa.paged_mqa_logits_backend import DSAPagedMQALogitsBackend
        from sglang.srt.runtime_context import get_exec

        indexer.paged_mqa_logits_backend = DSAPagedMQALogitsBackend.resolve(
            get_exec().kernel.dsa_paged_mqa_logits_backend
        )
        indexer.num_init_tokens = indexer.num_local_tokens = 0  # DeepSeek-V3.2 has none
        indexer._mqa_logits_budget_bytes = {}
        indexer.layer_id = 0

    PROBE = "sglang.kernels.ops.attention.dsa.paged_mqa_logits:sm90_paged_mqa_takes_next_n_rows"

    def next_n_rows_probe(self, backends: dict) -> dict | None:
        """The answer each next_n's backend in ``backends`` ((next_n, forced per-token) -> backend) got.

        Asked as the backend asks, with its index heads and head dim: the probe caches its answer per
        process and shape, so this reads the backend's own answer and calls DeepGEMM only where the
        backend had not asked. Even next_n are not asked (None): the SM90 rule reads odd next_n's only."""
        mod_name, name = self.PROBE.split(":")
        probe = getattr(importlib.import_module(mod_name), name, None)
        backend_mod = importlib.import_module("sglang.srt.layers.attention.dsa_backend")
        deep_gemm_fns = getattr(backend_mod, "_deep_gemm_paged_mqa_fns", None)
        if probe is None or deep_gemm_fns is None:  # a tree without the line's patch 2
            return None
        chosen = {n: b for (n, forced), b in sorted(backends.items()) if not forced}
        first = next(iter(chosen.values()))
        heads, head_dim = first.dsa_index_n_heads, first.dsa_index_head_dim
        answers = {
            str(n): bool(probe(n, heads, head_dim, deep_gemm_fns, device=b.device)) if n % 2 else None
            for n, b in chosen.items()
        }
        return dict(function=self.PROBE, heads=heads, head_dim=head_dim, answers=answers)


ADAPTERS = {"0.5.14": Tree, "0.5.23": Tree0523}


def for_tree(tree: Path) -> Tree:
    """The adapter for the sglang tree under ``tree`` (a folder holding ``sglang/``)."""
    version = tree_version(tree)
    for release, cls in ADAPTERS.items():
        if version == release or version.startswith(release + "."):
            return cls(version)
    if version == "unknown":  # a source checkout without the wheel's _version.py: by layout
        for release, cls in reversed(ADAPTERS.items()):
            mod = cls.act_quant.split(":")[0].replace(".", "/") + ".py"
            if (Path(tree) / mod).is_file():
                adapter = cls(version)
                adapter.notes.append(f"no sglang/_version.py: taken for {release} ({mod} is there)")
                return adapter
    raise SystemExit(f"no bench/indexer/trees.py adapter for sglang {version} ({tree}); known: {sorted(ADAPTERS)}")
