"""Whether every engine of a run fits the GPU at once, estimated before anything starts.

The engines of a run live side by side on one GPU, each with its weights, its KV pool, its CUDA
graphs and what its prefill leaves in torch's cache; the third engine of a run that does not fit dies
minutes in (results/engine_h200_tpot_wide_long_oom.json: at its pool prefill, after seven minutes of
engine starts and the other two engines' prefills). Per engine, in GiB (sglang's "GB"):

- weights: the model's parameters (bench/engine_model.py ``param_counts``, which the CPU check
  compares with sglang's own build) in bf16, the draft's own embedding and head included (sglang
  loads them before it shares the target's);
- context: the CUDA context and what else is not torch's: 0.76 GiB, what the OOM message of the run
  above gave for the patched scheduler (31.97 GiB in use, 30.64 allocated, 0.57 reserved);
- KV pool: ``max_total_tokens`` times the bytes sglang's DSA pool keeps per token and layer (the MLA
  cache, 656 bytes in FP8 with its scales and bf16 rope, 576 x 2 in bf16, and the indexer's 128 FP8
  keys with a 4-byte scale), over the target's layers and the draft's one;
- graphs: 0.017 GiB per request of the largest graph batch: the most the patched engine's capture
  rounds took, from the first round's start to the last round's end, in the H200 logs (2.18 GiB at
  128 requests in the OOM run above, 1.48 and 2.05 in the two ``wide`` runs, 1.06 at 64 in
  ``tpot_run1``; free memory as sglang logs it, so another engine's last rounds may be in it);
- activations: sglang's own reserve for them (``_handle_gpu_memory_settings`` in 0.5.14, the
  memory hook in 0.5.23: 512 MB plus 1.5 MB per token of a prefill chunk), what sglang keeps out of
  its static memory for one engine that owns the GPU. (sglang reserves 1.5 GB more where an MLA model
  captures prefill CUDA graphs; not counted: the v0.5.23 run that did, tpot_v0_5_23_run2, got past
  three 2.9M-token prefills, which that 1.5 GB would have refused.)

``python -m bench.engine.memory RUN.json ...`` prints the estimate for runs that were made (from each
JSON's own engine arguments) beside whether they ran out of memory.

The GPU's size is what nvidia-smi gives, less what its driver reserves (on the H200, 139.8 GiB, the
total torch's OOM message names). Against the committed runs (tests/bench/test_engine_memory.py):
every run that got past its prefills fits, the closest tpot_run1 (139.3 GiB, three engines of 2.9M
tokens), and the 3.2M-token wide_long run that ran out of memory does not (145.8 GiB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import engine_model

GIB = 1 << 30
CONTEXT_GIB = 0.76
GRAPHS_GIB_PER_REQUEST = 0.017
INDEX_K_BYTES = 128 + 4  # FP8 keys and one fp32 scale per 128
MLA_BYTES = {"fp8_e4m3": 512 + 512 // 128 * 4 + 64 * 2, "bfloat16": (512 + 64) * 2}
DRAFT_LAYERS = 1


@dataclass(frozen=True)
class Footprint:
    """One engine's GPU memory, GiB."""

    weights: float
    context: float
    kv_pool: float
    graphs: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.context + self.kv_pool + self.graphs + self.activations


def footprint(engine_args: dict, config: dict) -> Footprint:
    """One engine's memory for these ``sglang.Engine`` arguments and model config."""
    params = engine_model.param_counts(config)
    layers = config["num_hidden_layers"] + DRAFT_LAYERS
    per_token = layers * (MLA_BYTES[engine_args["kv_cache_dtype"]] + INDEX_K_BYTES)
    activations_mb = 512 + 1.5 * max(engine_args["chunked_prefill_size"], 2048)
    return Footprint(
        weights=2 * (params["target"] + params["draft"]) / GIB,
        context=CONTEXT_GIB,
        kv_pool=engine_args["max_total_tokens"] * per_token / GIB,
        graphs=GRAPHS_GIB_PER_REQUEST * engine_args["cuda_graph_max_bs_decode"],
        activations=activations_mb / 1024,
    )


def gpu_memory_gib() -> float | None:
    """The GPU's memory as nvidia-smi gives it, less what its driver reserves, GiB; None where there is
    no nvidia-smi to ask."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total,memory.reserved", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    fields = [f.strip() for f in out.stdout.split(",")] if out.returncode == 0 else []
    try:
        total = int(fields[0])
    except (IndexError, ValueError):
        return None
    reserved = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
    return (total - reserved) / 1024


def plan(engine_args: dict, config: dict, engines: int, gpu_gib: float | None) -> dict:
    """The run's memory plan for its JSON: one engine's footprint, all of them, and the GPU's size."""
    one = footprint(engine_args, config)
    return {
        "per_engine_gib": {k: round(v, 2) for k, v in asdict(one).items()},
        "engines": engines,
        "total_gib": round(engines * one.total, 1),
        "gpu_gib": None if gpu_gib is None else round(gpu_gib, 1),
        "fits": None if gpu_gib is None else engines * one.total <= gpu_gib,
    }


def refusal(memory_plan: dict, what: str) -> str | None:
    """One line that says why the engines do not fit the GPU together, or None where they do (or
    where the GPU's size is not known)."""
    if memory_plan["fits"] is not False:
        return None
    parts = memory_plan["per_engine_gib"]
    each = ", ".join(f"{name.replace('_', ' ')} {gib:.1f}" for name, gib in parts.items())
    return (
        f"{what}: {memory_plan['engines']} engines need about {memory_plan['total_gib']} GiB "
        f"of the GPU's {memory_plan['gpu_gib']} (each: {each}); run fewer engines, fewer KV tokens "
        "(a smaller grid, an FP8 KV cache) or smaller prefill chunks (chunked_prefill_size)"
    )


# The most an engine's prefill left held in torch's cache beyond sglang's reserve: the wide_long run's
# first engine held 65.15 GiB after prefilling 3.0M tokens in 16k chunks (its OOM message), 16.5 GiB
# above its estimate (48.6); its second engine, doing the same, held 26 GiB less.
PREFILL_EXCESS_GIB = 16.5


def tight(memory_plan: dict) -> str | None:
    """A note where the engines fit by less than what one engine's prefill has been seen to hold beyond
    sglang's reserve."""
    room = _tight_room(memory_plan)
    if room is None:
        return None
    return (
        f"memory: {memory_plan['engines']} engines estimated at {memory_plan['total_gib']} of "
        f"{memory_plan['gpu_gib']} GiB; {room:.1f} GiB to spare, less than the {PREFILL_EXCESS_GIB} GiB "
        "one engine's prefill has held beyond sglang's reserve (results/engine_h200_tpot_wide_long_oom.json)"
    )


def _tight_room(memory_plan: dict) -> float | None:
    """The GiB the engines leave free where they fit by less than PREFILL_EXCESS_GIB; None otherwise."""
    if not memory_plan.get("fits"):
        return None
    room = memory_plan["gpu_gib"] - memory_plan["total_gib"]
    return room if room < PREFILL_EXCESS_GIB else None


# sglang's DSA indexer (0.5.14 and 0.5.23) sizes the logits of a prefill's ragged top-k from the memory it
# sees once, at its first prefill, and keeps that size: at most min(0.3 of the GPU, the GPU less
# mem_fraction_static, times this variable, default 0.2, times the free memory then). Each engine of a run
# takes it as if it owned the GPU: 11.2 GiB at mem_fraction_static 0.6 on an H200. Two next_n 2 runs on the
# H200 (engine_h200_v0_5_23_n2_*_source_oom.json) ran out of memory in that top-k, 7.4 and 8.5 GiB asked.
LOGITS_FRACTION_ENV = "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"
SGLANG_LOGITS_FRACTION = 0.2
SGLANG_LOGITS_TOTAL_FRACTION = 0.3


def logits_budget_gib(engine_args: dict, gpu_gib: float, fraction: float = SGLANG_LOGITS_FRACTION) -> float:
    """The most one engine's indexer takes for a prefill's logits, before it sees the free memory."""
    outside_static = gpu_gib * max(0.0, 1.0 - engine_args.get("mem_fraction_static", 0.0))
    return min(gpu_gib * SGLANG_LOGITS_TOTAL_FRACTION, outside_static * fraction)


def logits_cap(memory_plan: dict, engine_args: dict) -> tuple[str, str] | None:
    """Where the run is tight (``tight``): the value of LOGITS_FRACTION_ENV that holds every engine's
    indexer logits to a share of the room (half of it, split between the engines, the rest for the other
    transients of a prefill), and a line that says so; None where sglang's own size is left alone."""
    room = _tight_room(memory_plan)
    if room is None:
        return None
    each = max(room, 0.0) / 2 / memory_plan["engines"]
    default = logits_budget_gib(engine_args, memory_plan["gpu_gib"])
    if default <= each:
        return None
    fraction = SGLANG_LOGITS_FRACTION * each / default
    note = (
        f"memory: each engine's indexer logits held to {each:.1f} GiB ({LOGITS_FRACTION_ENV}={fraction:.4f}; "
        f"sglang would take up to {default:.1f} GiB each, sized as if it owned the GPU): the prefill's top-k "
        "runs in more chunks, decode is unchanged"
    )
    return f"{fraction:.4f}", note


def run_verdict(doc: dict, gpu_gib: float) -> str:
    """A committed run's estimate beside what happened to it."""
    meta = doc["meta"]
    engines = len(meta.get("engines") or ("pristine", "patched"))
    memory_plan = plan(meta["engine_args"], meta["model"], engines, gpu_gib)
    ran_out = any("OutOfMemoryError" in note for note in doc.get("notes", []))
    uncapped = logits_cap(memory_plan, meta["engine_args"]) and LOGITS_FRACTION_ENV not in (meta.get("env") or {})
    return (
        f"{engines} engines x {meta['engine_args']['max_total_tokens']} {meta['engine_args']['kv_cache_dtype']} tokens: "
        f"{memory_plan['total_gib']} of {gpu_gib} GiB, {'fits' if memory_plan['fits'] else 'does not fit'}"
        f"{', indexer logits not held to the room' if uncapped else ''}; "
        f"{'ran out of GPU memory' if ran_out else 'ran'}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="the memory estimate of engine runs that were made")
    ap.add_argument("runs", nargs="+", type=Path, help="bench/engine_ab.py JSONs")
    ap.add_argument("--gpu-memory-gib", type=float, default=139.8, help="default: the H200's, as torch gives it")
    args = ap.parse_args(argv)
    for path in args.runs:
        doc = json.loads(path.read_text())
        if "kv_cache_dtype" in doc.get("meta", {}).get("engine_args", {}):
            print(f"{path.name}: {run_verdict(doc, args.gpu_memory_gib)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
