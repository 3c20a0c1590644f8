"""What each engine is built to hold for a grid, and the ``sglang.Engine`` arguments that ask for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.engine.grid import WARMUP_PROMPT, pool_for

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)

# The KV cache a DSA deployment serves with, and the backends that read it on SM90 (sglang's own
# Hopper default for an FP8 KV cache).
KV_CACHES = {
    "bfloat16": {
        "kv_cache_dtype": "bfloat16",
        "dsa_prefill_backend": "flashmla_sparse",
        "dsa_decode_backend": "flashmla_sparse",
    },
    "fp8_e4m3": {
        "kv_cache_dtype": "fp8_e4m3",
        "dsa_prefill_backend": "flashmla_kv",
        "dsa_decode_backend": "flashmla_kv",
    },
}


@dataclass(frozen=True)
class Sizing:
    """What each engine is built to hold for a grid: decode graphs and running requests up to its
    largest batch (64 at least, the size every earlier run used), its longest context, and KV tokens
    for the prompt pool, every run's outputs (the radix cache keeps them) and the warm-up."""

    max_bs: int
    max_ctx: int
    needed_kv_tokens: int

    @property
    def kv_tokens(self) -> int:
        """What each engine is asked for: the need rounded up to 100k (sglang rounds its pool down to
        whole pages, so a pool below this may still hold the need)."""
        return -(-self.needed_kv_tokens // 100_000) * 100_000


def sizing_for(cases: list, new_tokens: int, reps: int) -> Sizing:
    outputs = (reps + 2) * sum(bs for bs, _, _ in cases) * (new_tokens + 16)  # + a margins run and a profiled one
    pool = sum(r["prompt"][1] for r in pool_for(cases))
    return Sizing(
        max_bs=max([64, *(bs for bs, _, _ in cases)]),
        max_ctx=max(ctx for _, ctx, _ in cases),
        needed_kv_tokens=pool + outputs + 8 * (WARMUP_PROMPT[1] + 16),
    )


def engine_args(model_dir: Path, next_n: int, sizing: Sizing, overrides: dict) -> dict:
    args = {
        "model_path": str(model_dir),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": next_n - 1,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": next_n,
        # The bundle carries no FA3 (README of docs/gpu-bundle.md): FlashMLA for both phases, sparse
        # on a bf16 KV cache (the default here), FlashMLA-KV on an FP8 one (``--kv-cache``). The
        # indexer's own index-K cache is FP8 either way.
        **KV_CACHES["bfloat16"],
        "cuda_graph_max_bs_decode": sizing.max_bs,
        "cuda_graph_bs_decode": [b for b in GRAPH_BATCH_SIZES if b <= sizing.max_bs],
        "max_running_requests": sizing.max_bs,
        "context_length": sizing.max_ctx + 1024,
        "chunked_prefill_size": 16384,
        "max_total_tokens": sizing.kv_tokens,
        "mem_fraction_static": 0.6,
        "grammar_backend": "none",
        "random_seed": 0,
        "log_level": "warning",
    }
    args.update(overrides)
    return args


def parallel_label(overrides: dict) -> str:
    """``tp1`` on one GPU; ``dp2`` with DP attention over 2 ranks; ``tp2`` for plain TP 2."""
    tp = int(overrides.get("tp_size", 1))
    if overrides.get("enable_dp_attention"):
        return f"dp{int(overrides.get('dp_size', tp))}"
    return f"tp{tp}"
