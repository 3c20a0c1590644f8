"""sglang's own engine with MTP, pristine against patched, on one GPU: the number users see.

For each next_n, two ``sglang.Engine`` processes run side by side on the GPU (bench/engine_worker.py):
one imports the pristine tree, the other the patched tree, both given the same model folder
(bench/engine_model.py: DeepSeek-V3.2 shapes, dummy weights from sglang's fixed seed), the same
arguments (EAGLE with the NextN draft, topk 1, ``next_n - 1`` steps; sglang's defaults otherwise:
decode CUDA graphs on, overlap scheduler on, radix cache on) and the same requests.

Per next_n:
1. both engines start (the second after the first's KV pool exists, so its memory profile is
   honest) and warm up;
2. the pool prompts the grid's cases need are prefilled once per engine, each to the longest
   prefix any case asks of it (a case of N requests asks prefixes of prompts 0..N-1, of 128): so
   sglang's radix cache serves every case and a case costs its decode only. Every request still
   has its own KV pages: no two requests share a prefix;
3. each case (batch size x context x uniform/ragged lengths) runs ``reps`` times per engine in
   ABBA order (pristine, patched, patched, pristine, ...): greedy, ``ignore_eos``, streamed;
4. cases at or above ``--profile-from`` requests x context are run once more per engine with the
   first verify forwards under the profiler (the indexer's share of the step).

Per case the row gives the verify forward's GPU time (median over the case's TARGET_VERIFY
forwards, first ``skip`` steps of each run left out; CUDA events around ``ModelRunner.forward``
in the scheduler, bench/engine_probe), TPOT (per request, from the streamed chunks' times, then
the median), the step interval (the scheduler's wall time from one verify forward to the next:
with one token per step, the engine's own time per output token), each part of the decode step
(the whole step, the draft loop, verify, draft-extend: GPU time between CUDA events and host time
of the Python call, medians; for draft-extend the fraction that replayed its CUDA graph), the
ratios pristine/patched, the A/A floor (pristine's odd runs against its even runs, the same ABBA positions the patched
runs take), the fraction of requests whose output ids are identical to pristine's, and for a
divergence its first position (``--margins`` re-runs such a case with top-2 logprobs to give
the target's logit margin there).

Acceptance length is recorded and is meaningless here: dummy weights accept no draft token.

    python bench/engine_ab.py --pristine P/ --patched X/ --next-n 2,4 --out engine.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/
sys.path.insert(0, str(HERE.parent))

from bench import engine_model  # noqa: E402

POOL_PROMPTS = 128  # distinct prompts; a case of N requests asks prefixes of prompts 0..N-1
MAX_CTX = 131072
WARMUP_PROMPT = (1000, 1024)
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)

SEED_CASE_S = 120  # what the IndexShare case needs: its own engine pair (warm JIT caches) and 24 short requests

# (batch size, context, lengths): at most POOL_PROMPTS requests of at most MAX_CTX tokens.
GRIDS = {
    # 1 to 64 requests at 4k and 16k, ragged 16k, and 64k at 8 and 32
    "full": [(bs, ctx, "uniform") for ctx in (4096, 16384) for bs in (1, 8, 32, 64)]
    + [(64, 16384, "ragged"), (8, 65536, "uniform"), (32, 65536, "uniform"), (32, 65536, "ragged")],
    # The targets (32 requests x 64k) and two 16k points, from 32 pool prompts of 64k only.
    "targets": [
        (8, 16384, "uniform"),
        (32, 16384, "uniform"),
        (32, 65536, "uniform"),
        (32, 65536, "ragged"),
    ],
    "targets64k": [(32, 65536, "uniform"), (32, 65536, "ragged")],
    # What a server sees at its target sizes: 32 x 64k (uniform, ragged) and 64 x 16k.
    "deploy": [(32, 65536, "uniform"), (32, 65536, "ragged"), (64, 16384, "uniform")],
    "probe": [(8, 4096, "uniform")],
    # The ends of the 1-64 request range at 4k and 64k, beside the targets' 32 x 64k.
    "sizes": [(1, 4096, "uniform"), (16, 4096, "uniform"), (1, 65536, "uniform"), (16, 65536, "uniform")],
    # Many requests: 64 and 128 at 16k (2M pool tokens per engine, what one call has time to prefill).
    "wide": [(64, 16384, "uniform"), (128, 16384, "uniform")],
    # 128 requests at 16k beside the longest context, 8 x 128k (3M pool tokens per engine).
    "wide_long": [(128, 16384, "uniform"), (8, 131072, "uniform")],
    # The longest context alone, 8 x 128k (three engines' 128k prefills together overran the H200 at
    # 16k chunks beside wide's pool: results/engine_h200_tpot_wide_long_oom.json).
    "long": [(8, 131072, "uniform")],
    # 64 requests at the targets' 64k (4.2M pool tokens per engine: a call of its own).
    "targets64k_wide": [(64, 65536, "uniform")],
}
# Kernels of the indexer's top-k step inside a verify forward, by name (DeepGEMM's paged-MQA
# logits, the Triton single-read kernel of the v0.5.14 line's patch 5, the top-k transforms).
INDEXER_KERNELS = {
    "paged_mqa_logits": lambda n: "paged_mqa_logits" in n and "metadata" not in n,
    "single_read": lambda n: "single_read" in n,
    "topk": lambda n: "topk" in n.lower(),
}


def pool_for(cases: list) -> list[dict]:
    """The prefill requests of the pool prompts these cases ask prefixes of, each to the longest prefix
    any case asks of it (a shorter one is then served by the radix cache)."""
    longest: dict[int, int] = {}
    for spec in cases:
        for r in Case(*spec, 1).requests():
            index, length = r["prompt"]
            longest[index] = max(length, longest.get(index, 0))
    return [{"prompt": [i, n], "max_new_tokens": 1} for i, n in sorted(longest.items())]


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


@dataclass
class Case:
    batch_size: int
    ctx: int
    lengths: str
    new_tokens: int

    @property
    def name(self) -> str:
        return f"bs{self.batch_size}-ctx{self.ctx // 1024}k-{self.lengths}"

    def requests(self, top_logprobs: bool = False) -> list[dict]:
        if self.batch_size > POOL_PROMPTS or self.ctx > MAX_CTX:
            raise ValueError(f"{self.name}: the prompt pool holds {POOL_PROMPTS} prompts of at most {MAX_CTX} tokens")
        rng = random.Random(f"{self.batch_size}-{self.ctx}-{self.lengths}")
        out = []
        for index in range(self.batch_size):
            length = self.ctx if self.lengths == "uniform" else rng.randint(self.ctx // 2, self.ctx)
            out.append({"prompt": [index, length], "max_new_tokens": self.new_tokens, "top_logprobs": top_logprobs})
        return out


# -- what a row says (pure functions, tested on CPU) ------------------------------------------------
def verify_step_us(runs: list[dict], batch_size: int, skip: int) -> float | None:
    """Median GPU time of the verify forwards of these runs, the first ``skip`` of each run left out."""
    samples = []
    for run in runs:
        records = sorted(
            (r for r in run.get("verify", []) if r["batch_size"] == batch_size and not r["profiled"]),
            key=lambda r: r["t"],
        )
        samples += [r["gpu_ms"] * 1000.0 for r in records[skip:]]
    return statistics.median(samples) if samples else None


def step_interval_ms(runs: list[dict], batch_size: int, skip: int) -> float | None:
    """Median wall time from one verify forward's start to the next, in the scheduler: with dummy
    weights every step yields one token per request, so this is the engine's own time per output
    token, free of the streaming path's noise."""
    gaps = []
    for run in runs:
        starts = sorted(r["t"] for r in run.get("verify", []) if r["batch_size"] == batch_size)[skip:]
        gaps += [(b - a) * 1000.0 for a, b in zip(starts, starts[1:], strict=False)]
    return statistics.median(gaps) if gaps else None


STEP_PARTS = ("step", "draft", "verify", "draft_extend")


def part_records(run: dict, part: str, batch_size: int | None, skip: int) -> list[dict]:
    """One run's records of one part of the decode step at ``batch_size`` (None: every batch
    size), in launch order, the first ``skip`` left out."""
    records = sorted(
        (
            r
            for r in run.get("steps", [])
            if r["part"] == part and (batch_size is None or r["batch_size"] == batch_size)
        ),
        key=lambda r: r["t"],
    )
    return records[skip:]


def step_parts(runs: list[dict], batch_size: int | None, skip: int) -> dict:
    """Per part of the decode step (bench/engine_probe's steps records): median GPU and host time,
    the first ``skip`` of each run left out, at ``batch_size`` (None: every batch size, for the
    IndexShare case whose batches merge and shrink); for draft-extend also the fraction of them
    that replayed a CUDA graph; for the whole step also the host gap between steps."""
    parts = {}
    for part in STEP_PARTS:
        per_run = [part_records(run, part, batch_size, skip) for run in runs]
        chosen = [r for records in per_run for r in records]
        if not chosen:
            continue
        parts[part] = {
            "gpu_ms": statistics.median(r["gpu_ms"] for r in chosen),
            "host_ms": statistics.median(r["host_ms"] for r in chosen),
            "host_ms_max": max(r["host_ms"] for r in chosen),
            "samples": len(chosen),
        }
        if part == "draft_extend":
            parts[part]["graph"] = sum(bool(r.get("graph")) for r in chosen) / len(chosen)
        if part == "step":
            gap = _median_host_gap(per_run)
            if gap is not None:
                parts[part]["host_gap_ms"] = gap
    return parts


def _median_host_gap(steps_per_run: list[list[dict]]) -> float | None:
    """Median host time from the end of one decode step's Python call to the start of the next:
    the scheduler's own work between steps (batch bookkeeping, output processing)."""
    gaps = [
        (b["t"] - a["t"]) * 1000.0 - a["host_ms"]
        for steps in steps_per_run
        for a, b in zip(steps, steps[1:], strict=False)
    ]
    return statistics.median(gaps) if gaps else None


def _part(parts: dict, part: str, what: str) -> float | None:
    return (parts.get(part) or {}).get(what)


def tpot_ms(runs: list[dict]) -> float | None:
    values = [o["tpot_ms"] for run in runs for o in run["outputs"] if o.get("tpot_ms") is not None]
    return statistics.median(values) if values else None


def tpot_ms_per_run(runs: list[dict]) -> list[float | None]:
    """Each run's own TPOT (the median over its requests; None for a run without one), in run order,
    so that it lines up with the run's other records (its cores)."""
    return [tpot_ms([run]) for run in runs]


def mean_tpot_ms(runs: list[dict]) -> float | None:
    """The mean of the runs' own TPOTs: where whole runs fall into a fast or a slow mode (the host's
    speed moves run by run), the median over every request picks one mode; the mean weighs both as
    often as they came."""
    values = [t for t in tpot_ms_per_run(runs) if t is not None]
    return statistics.fmean(values) if values else None


def tokens_per_s(runs: list[dict]) -> float | None:
    values = [run["tokens_per_s"] for run in runs if run.get("tokens_per_s")]
    return statistics.median(values) if values else None


NEAR_TIE = 0.05  # top-1 minus top-2 logit below this: a flip there is rounding, not a different answer


def compare_positions(reference: dict, candidate: dict, batch_size: int) -> dict | None:
    """The target's verdict at every verify position of two greedy runs, forward by forward (the
    probe's positions records at ``batch_size``, in launch order): how many positions, how many
    with the same argmax, how many rows with bit-identical logits (their sums), and each argmax
    difference with both margins; a difference where either margin is below ``NEAR_TIE`` counts
    as a near-tie."""

    def forwards(run):
        return sorted((r for r in run.get("positions", []) if r["batch_size"] == batch_size), key=lambda r: r["t"])

    ref, cand = forwards(reference), forwards(candidate)
    if not ref or not cand:
        return None
    positions = same = same_logits = near_ties = 0
    differences = []
    for step, (a, b) in enumerate(zip(ref, cand, strict=False)):
        for row, (ia, ib) in enumerate(zip(a["argmax"], b["argmax"], strict=False)):
            positions += 1
            same_logits += a["logit_sum"][row] == b["logit_sum"][row]
            if ia == ib:
                same += 1
                continue
            tie = min(a["margin"][row], b["margin"][row]) < NEAR_TIE
            near_ties += tie
            differences.append(
                {"forward": step, "row": row, "margins": [a["margin"][row], b["margin"][row]], "near_tie": tie}
            )
    return {
        "forwards": [len(ref), len(cand)],
        "positions": positions,
        "identical": same / positions if positions else None,
        "logits_identical": same_logits / positions if positions else None,
        "near_ties": near_ties,
        "differences": differences[:16],
    }


def layouts_seen(runs: list[dict], batch_size: int) -> list[str]:
    seen = set()
    for run in runs:
        for r in run.get("verify", []):
            if r["batch_size"] == batch_size:
                seen.add(f"{r.get('layout') or '-'} {r.get('ctx_lens_2d')} {'graph' if r.get('graph') else 'eager'}")
    return sorted(seen)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_outputs(reference: list[dict], candidate: list[dict]) -> tuple[float, list[dict]]:
    """Fraction of requests with identical output ids, and each divergence's first position."""
    same, divergences = 0, []
    for i, (r, c) in enumerate(zip(reference, candidate, strict=False)):
        pos = first_divergence(r["output_ids"], c["output_ids"])
        if pos is None:
            same += 1
        else:
            divergences.append({"request": i, "position": pos})
    return (same / len(reference) if reference else 0.0), divergences


def logit_margin(top_logprobs: list, position: int) -> float | None:
    """The target's top-1 minus top-2 logprob at ``position`` (from a run with top-2 logprobs)."""
    if position >= len(top_logprobs) or len(top_logprobs[position]) < 2:
        return None
    (lp1, _), (lp2, _) = top_logprobs[position][:2]
    return lp1 - lp2


def indexer_share(profile: dict | None) -> dict | None:
    """Per profiled verify forward: indexer kernels' time over all kernels' time, then the median."""
    if not profile or not profile.get("steps"):
        return None
    shares, per_kind, total_us, kernel_names = [], {}, [], set()
    for step in profile["steps"]:
        kernels = step["kernels"]
        total = sum(us for us, _ in kernels.values())
        if total <= 0:
            continue
        matched = 0.0
        for kind, match in INDEXER_KERNELS.items():
            us = sum(v[0] for name, v in kernels.items() if match(name))
            per_kind.setdefault(kind, []).append(us)
            matched += us
            kernel_names.update(name for name in kernels if match(name))
        shares.append(matched / total)
        total_us.append(total)
    if not shares:
        return None
    return {
        "share": statistics.median(shares),
        "kernel_us": statistics.median(total_us),
        "indexer_us": {k: statistics.median(v) for k, v in per_kind.items()},
        "indexer_kernels": sorted(kernel_names)[:12],
        "steps": len(shares),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _engine_summary(runs: list[dict], batch_size: int, skip: int) -> dict:
    return {
        "verify_step_us": verify_step_us(runs, batch_size, skip),
        "tpot_ms": tpot_ms(runs),
        "tpot_ms_mean_of_runs": mean_tpot_ms(runs),
        "tpot_ms_runs": tpot_ms_per_run(runs),
        "cpus_runs": [run.get("cpus") for run in runs],
        "tokens_per_s": tokens_per_s(runs),
        "step_interval_ms": step_interval_ms(runs, batch_size, skip),
        "layouts": layouts_seen(runs, batch_size),
        "parts": step_parts(runs, batch_size, skip),
    }


def _floor(first: list[dict], second: list[dict], bs: int, skip: int) -> dict:
    """The ratios two sets of pristine runs give (what a pure re-run moves)."""
    return {
        "verify": ratio(verify_step_us(first, bs, skip), verify_step_us(second, bs, skip)),
        "tpot": ratio(tpot_ms(first), tpot_ms(second)),
        "tpot_mean_of_runs": ratio(mean_tpot_ms(first), mean_tpot_ms(second)),
        "step_interval": ratio(step_interval_ms(first, bs, skip), step_interval_ms(second, bs, skip)),
        "step_gpu": ratio(
            _part(step_parts(first, bs, skip), "step", "gpu_ms"),
            _part(step_parts(second, bs, skip), "step", "gpu_ms"),
        ),
        "tokens_per_s": ratio(tokens_per_s(second), tokens_per_s(first)),
    }


def case_row(
    case: Case,
    next_n: int,
    runs: dict,
    profiles: dict,
    skip: int,
    labels: dict | None = None,
    greedy: dict | None = None,
    acceptance: float | None = None,
) -> dict:
    """One JSON row from the runs of the engines (``runs[label]``: that engine's timed runs, in
    order; ``pristine_b``, where it ran, is a second pristine process). ``greedy[label]``: one
    greedy run per engine with every verify position recorded (the accuracy runs, untimed);
    ``acceptance``: the simulated acceptance length the timed runs ran with (None: greedy)."""
    p_runs, x_runs = runs["pristine"], runs["patched"]
    bs = case.batch_size
    pristine, patched = _engine_summary(p_runs, bs, skip), _engine_summary(x_runs, bs, skip)
    aa = _floor(p_runs[::2], p_runs[1::2], bs, skip) if len(p_runs) >= 2 else None
    aa_processes = _floor(p_runs, runs["pristine_b"], bs, skip) if runs.get("pristine_b") else None
    # Simulated acceptance overwrites the emitted tokens: identity comes from the greedy runs then.
    outputs_of = {label: [r["outputs"] for r in rs] for label, rs in runs.items()}
    if acceptance and greedy:
        outputs_of = {label: [run["outputs"]] for label, run in greedy.items()}
    identical, divergences = [], []
    for candidate in outputs_of["patched"]:
        fraction, div = compare_outputs(outputs_of["pristine"][0], candidate)
        identical.append(fraction)
        divergences += div
    repeats = outputs_of["pristine"][1:] + outputs_of.get("pristine_b", [])
    p_repeat = [compare_outputs(outputs_of["pristine"][0], o)[0] for o in repeats]
    accept = [
        o["meta"].get("spec_accept_length")
        for r in p_runs + x_runs
        for o in r["outputs"]
        if o["meta"].get("spec_accept_length") is not None
    ]
    positions = processes_positions = None
    if greedy and "pristine" in greedy and "patched" in greedy:
        positions = compare_positions(greedy["pristine"], greedy["patched"], bs)
        if "pristine_b" in greedy:
            processes_positions = compare_positions(greedy["pristine"], greedy["pristine_b"], bs)
    floor = aa_processes or aa or {}
    return {
        **(labels or {}),
        "next_n": next_n,
        "batch_size": bs,
        "ctx": case.ctx,
        "lengths": case.lengths,
        "new_tokens": case.new_tokens,
        "simulated_acceptance": acceptance,
        "cuda_graph": all(
            r.get("graph") for run in p_runs + x_runs for r in run.get("verify", []) if r["batch_size"] == bs
        ),
        "pristine": pristine,
        "patched": patched,
        "speedup_verify": ratio(pristine["verify_step_us"], patched["verify_step_us"]),
        "speedup_tpot": ratio(pristine["tpot_ms"], patched["tpot_ms"]),
        "speedup_tpot_mean_of_runs": ratio(pristine["tpot_ms_mean_of_runs"], patched["tpot_ms_mean_of_runs"]),
        "speedup_tokens_per_s": ratio(patched["tokens_per_s"], pristine["tokens_per_s"]),
        "speedup_step_interval": ratio(pristine["step_interval_ms"], patched["step_interval_ms"]),
        # pristine over patched, per part of the decode step (GPU events, host wall time)
        "speedup_parts": {
            part: {
                what: ratio(_part(pristine["parts"], part, f"{what}_ms"), _part(patched["parts"], part, f"{what}_ms"))
                for what in ("gpu", "host")
            }
            for part in STEP_PARTS
            if part in pristine["parts"] and part in patched["parts"]
        },
        "aa_noise": aa,
        # the floor that covers what the A/B has: two engine processes (where a second pristine ran)
        "aa_noise_processes": aa_processes,
        "aa_noise_tpot": floor.get("tpot"),
        "aa_noise_tpot_mean_of_runs": floor.get("tpot_mean_of_runs"),
        "aa_noise_kind": "two processes" if aa_processes else "one process, its runs in two halves",
        "indexer_share": {label: indexer_share(profiles.get(label)) for label in ("pristine", "patched")},
        "tokens_identical": min(identical) if identical else None,
        "pristine_repeat_identical": min(p_repeat) if p_repeat else None,
        "divergences": divergences[:16],
        "verify_positions": positions,
        "verify_positions_identical": (positions or {}).get("identical"),
        "verify_positions_two_pristine": processes_positions,
        "verify_samples": {
            label: sum(1 for run in rs for r in run.get("verify", []) if r["batch_size"] == bs and not r["profiled"])
            for label, rs in runs.items()
        },
        "accept_length": statistics.median(accept) if accept else None,
    }


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s.*)?$")


def first_error(log: str) -> str | None:
    """The exception line that ends the first traceback in an engine log ("torch.AcceleratorError:
    CUDA error: ..."), or None."""
    in_traceback = False
    for line in log.splitlines():
        text = line.strip()
        if "Traceback (most recent call last)" in text:
            in_traceback = True
        elif in_traceback and _EXCEPTION_LINE.match(text):
            return text
    return None


# -- the engine processes ------------------------------------------------------------------------------
class EngineProcess:
    """A bench/engine_worker.py process (in a session of its own, so its sglang children go with it)."""

    def __init__(
        self,
        label: str,
        tree: Path,
        spec: dict,
        workdir: Path,
        extra_path: list[str],
        env: dict,
        script: Path,
        cpus: list[int] | None = None,
    ):
        self.label = label
        self.cpus = cpus
        self.probe_dir = workdir / f"probe-{label}"
        self.probe_dir.mkdir(parents=True, exist_ok=True)
        spec = {**spec, "probe_dir": str(self.probe_dir)}
        spec_file = workdir / f"spec-{label}.json"
        spec_file.write_text(json.dumps(spec, indent=1))
        read_fd, write_fd = os.pipe()
        child_env = {
            **os.environ,
            **env,
            "PYTHONPATH": os.pathsep.join([str(HERE / "engine_probe"), str(tree), *extra_path]),
            "SGLPATCH_ENGINE_PROBE_DIR": str(self.probe_dir),
        }
        self.log_path = workdir / f"engine-{label}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--spec", str(spec_file), "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=child_env,
            pass_fds=(write_fd,),
            start_new_session=True,
            text=True,
            # the engine and every process it starts run on their own cores only
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        self.pinned = cpus
        self.started = None

    def pin(self, cpus: list[int]) -> None:
        """Every thread of the engine's processes onto ``cpus`` from now on."""
        for pid in process_tree(self.proc.pid):
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError, ValueError):
                    os.sched_setaffinity(int(task.name), cpus)
        self.pinned = cpus

    def read_reply(self, timeout_s: float) -> dict:
        import select

        ready, _, _ = select.select([self.replies], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"{self.label}: no answer within {timeout_s:.0f} s (log: {self.log_path})")
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the engine process ended (exit {self.proc.poll()}); {self.failure()}")
        return json.loads(line)

    def wait_ready(self, timeout_s: float) -> dict:
        self.started = self.read_reply(timeout_s)
        if not self.started.get("ready"):
            raise RuntimeError(f"{self.label}: {self.started.get('error')}\n{self.tail()}")
        return self.started

    def call(self, command: dict, timeout_s: float = 300) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer = self.read_reply(timeout_s)
        if "error" in answer:
            raise RuntimeError(f"{self.label}: {answer['error']}")
        return answer

    def tail(self, lines: int = 25) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def failure(self) -> str:
        """The exception the engine's log names, else its last lines (a dying process's thread dump
        buries the error under the stacks of idle threads)."""
        self.log.flush()
        error = first_error(self.log_path.read_text(errors="replace"))
        if error:
            return f"{error} (log: {self.log_path.name})"
        return f"last log lines:\n{self.tail()}"

    def stop(self) -> None:
        """sglang's own shutdown first; then whatever is left of the process group goes, so the GPU's
        memory is free before the next pair starts."""
        if self.proc.poll() is None:
            try:
                self.call({"op": "shutdown"}, timeout_s=60)
                self.proc.wait(timeout=30)
            except Exception:
                pass
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
            if not _group_alive(self.proc.pid):
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + wait_s
            while time.time() < deadline and (self.proc.poll() is None or _group_alive(self.proc.pid)):
                time.sleep(0.2)
        self.proc.wait(timeout=30)
        self.log.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for their parent do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def process_tree(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and every process below it (from each process's parent in /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def cpu_groups(cpus: list[int], engines: int, core_of: dict[int, tuple] | None = None) -> list[list[int]] | None:
    """Disjoint, equal sets of cores, one per engine, the last core left to the driver; None where
    there are too few cores for two each. With ``core_of`` (logical CPU -> physical core) whole
    physical cores are dealt out, so that no two engines share one through its SMT siblings."""
    by_core: dict[tuple, list[int]] = {}
    for cpu in sorted(cpus):
        by_core.setdefault((core_of or {}).get(cpu, (cpu,)), []).append(cpu)
    return _deal(sorted(by_core.values()), engines) or _deal([[cpu] for cpu in sorted(cpus)], engines)


def _deal(units: list[list[int]], engines: int) -> list[list[int]] | None:
    """``units`` (cores, each its CPUs) in equal runs, one per engine, the last unit left over."""
    per_engine = (len(units) - 1) // engines
    if per_engine < 1 or sum(map(len, units[:per_engine])) < 2:
        return None
    return [
        sorted(cpu for unit in units[i * per_engine : (i + 1) * per_engine] for cpu in unit) for i in range(engines)
    ]


def physical_cores(cpus: list[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> dict[int, tuple]:
    """Logical CPU -> (package, core) from sysfs; empty where the topology cannot be read."""
    out = {}
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            out[cpu] = (
                int((topology / "physical_package_id").read_text()),
                int((topology / "core_id").read_text()),
            )
        except (OSError, ValueError):
            return {}
    return out


def start_order(labels: tuple, block: int) -> list[str]:
    """Which engine starts first moves round with each block (a next_n, or an engine restart)."""
    k = block % len(labels)
    return list(labels[k:] + labels[:k])


def cores_for_rep(labels: tuple, groups: list[list[int]], rep: int) -> dict[str, list[int]]:
    """The core groups go round the engines rep by rep: a slower set of cores (a VM's vCPUs are not
    alike) weighs on every engine alike, not on whichever engine it was dealt at start."""
    return {label: groups[(k + rep) % len(groups)] for k, label in enumerate(labels)}


def run_order(labels: tuple, reps: int) -> list[str]:
    """Timed runs per case: with two engines ABBA...; with three, every permutation in turn, so each
    engine takes each place in the order equally often over six repeats."""
    if len(labels) == 2:
        a, b = labels
        return [x for rep in range(reps) for x in ((a, b) if rep % 2 == 0 else (b, a))]
    orders = list(itertools.permutations(labels))
    return [x for rep in range(reps) for x in orders[rep % len(orders)]]


def _ints(text: str) -> list[int]:
    """``2,3,4`` -> [2, 3, 4]; an empty text is an empty list."""
    return [int(item) for item in text.split(",") if item]


def parse_acceptance(text: str) -> dict[int, float]:
    """``4:3,6:4`` -> {4: 3.0, 6: 4.0}: the simulated acceptance length per next_n."""
    out = {}
    for item in filter(None, text.split(",")):
        next_n, _, length = item.partition(":")
        out[int(next_n)] = float(length)
        if not 1 <= out[int(next_n)] <= int(next_n):
            raise ValueError(f"acceptance {item!r}: the length must lie in 1..next_n")
    return out


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


@dataclass
class Bench:
    trees: dict
    workdir: Path
    out: Path
    extra_path: list
    env: dict
    layers: int
    reps: int
    skip: int
    new_tokens: int
    deadline: float
    profile_from: int
    margins: bool
    meta: dict
    worker_script: Path = HERE / "engine_worker.py"
    engine_overrides: dict = field(default_factory=dict)
    sizing: Sizing = Sizing(max_bs=64, max_ctx=65536, needed_kv_tokens=3_400_000)
    rows: list = field(default_factory=list)
    engines: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    seed_cases: list = field(default_factory=list)  # the IndexShare case, one per next_n asked for
    block_s: list = field(default_factory=list)  # wall time of each next_n block run so far
    labels: tuple = ("pristine", "patched")  # ("pristine", "pristine_b", "patched"): a two-process A/A
    acceptance: dict = field(default_factory=dict)  # next_n -> simulated acceptance of the timed runs
    pin_cpus: bool = False
    cpus: list = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    blocks_started: int = 0

    @property
    def row_labels(self) -> dict:
        return row_labels(self.meta)

    def save(self) -> None:
        doc = {
            "meta": self.meta,
            "engines": self.engines,
            "rows": self.rows,
            "seed_cases": self.seed_cases,
            "notes": self.notes,
        }
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, self.out)

    def left_s(self) -> float:
        return self.deadline - time.time()

    def start_engines(self, model_dir: Path, next_n: int, tag: str, labels: tuple | None = None) -> dict:
        """The engines of a block, one after another (each starts once the one before has its KV
        pool, so its memory profile is honest); which starts first moves round block by block."""
        labels = labels or self.labels
        spec = {
            "engine": engine_args(model_dir, next_n, self.sizing, self.engine_overrides),
            "vocab_size": engine_model.VOCAB_SIZE,
        }
        order = start_order(labels, self.blocks_started)
        self.blocks_started += 1
        groups = cpu_groups(self.cpus, len(labels), physical_cores(self.cpus)) if self.pin_cpus else None
        engines, previous = {}, None
        for i, label in enumerate(order):
            engine_spec = {**spec, "start_after": str(previous.probe_dir / "pool_ready")} if previous else spec
            tree = self.trees["patched" if label == "patched" else "pristine"]
            previous = engines[label] = EngineProcess(
                f"{tag}-{label}",
                tree,
                engine_spec,
                self.workdir,
                self.extra_path,
                self.env,
                self.worker_script,
                cpus=groups[i] if groups else None,
            )
        try:
            for i, label in enumerate(order):
                engine = engines[label]
                started = engine.wait_ready(timeout_s=max(60.0, min(600.0, self.left_s())))
                self.engines.append(
                    {
                        "tag": tag,
                        "label": label,
                        "next_n": next_n,
                        "started": i + 1,
                        "cpus": engine.cpus,
                        **{k: started[k] for k in ("import_s", "start_s", "info")},
                    }
                )
                log(
                    f"{engine.label}: ready (import {started['import_s']:.0f} s, engine start {started['start_s']:.0f} s)"
                )
                kv_tokens = (started.get("info") or {}).get("max_total_num_tokens")
                if kv_tokens is not None and kv_tokens < self.sizing.needed_kv_tokens:
                    self.notes.append(
                        f"{engine.label}: a KV pool of {kv_tokens} tokens, below the {self.sizing.needed_kv_tokens} "
                        "the grid needs: pool prompts may be evicted and prefilled again inside timed runs"
                    )
                    log(self.notes[-1])
        except Exception:
            for engine in engines.values():
                engine.stop()
            raise
        return {label: engines[label] for label in labels}

    def run_next_n(self, next_n: int, cases: list) -> None:
        t_block = time.time()
        model_dir = engine_model.write_model(self.workdir / f"model-{self.layers}l", self.layers)
        pair = self.start_engines(model_dir, next_n, f"n{next_n}")
        try:
            warm = [{"prompt": list(WARMUP_PROMPT), "max_new_tokens": 16}] * 8
            for engine in pair.values():
                engine.call({"op": "generate", "requests": warm, "probe_window": False})
            t0 = time.time()
            pool = pool_for(cases)
            for label, engine in pair.items():
                t = time.time()
                engine.call(
                    {"op": "generate", "requests": pool, "probe_window": False}, timeout_s=max(60.0, self.left_s())
                )
                self.notes.append(
                    f"next_n={next_n} {label}: prompt pool ({len(pool)} prompts, {sum(r['prompt'][1] for r in pool)} tokens) prefilled in {time.time() - t:.1f} s"
                )
                log(self.notes[-1])
            log(f"next_n={next_n}: pool prefilled ({time.time() - t0:.0f} s)")
            for case_spec in cases:
                if self.left_s() < 25:
                    self.notes.append(f"next_n={next_n}: stopped before {case_spec} (deadline)")
                    break
                self.run_case(pair, next_n, Case(*case_spec, self.new_tokens))
        finally:
            for engine in pair.values():
                engine.stop()
            self.block_s.append(time.time() - t_block)

    def run_case(self, pair: dict, next_n: int, case: Case) -> None:
        acceptance = self.acceptance.get(next_n)
        timed_mode = {"simulate_acc_len": acceptance} if acceptance else {}
        runs = {label: [] for label in pair}
        labels = tuple(pair)
        groups = [pair[label].cpus for label in labels]
        order = run_order(labels, self.reps)
        for i, label in enumerate(order):
            if i % len(labels) == 0 and all(groups):
                for other, cpus in cores_for_rep(labels, groups, i // len(labels)).items():
                    pair[other].pin(cpus)
            run = pair[label].call({"op": "generate", "requests": case.requests(), "mode": timed_mode})
            runs[label].append({**run, "cpus": pair[label].pinned})
        for label in labels:
            if pair[label].cpus:
                pair[label].pin(pair[label].cpus)
        # one greedy run per engine, untimed, with the target's verdict at every verify position
        greedy = {
            label: engine.call(
                {
                    "op": "generate",
                    "requests": case.requests(),
                    "probe_window": False,
                    "mode": {"record_positions": True},
                }
            )
            for label, engine in pair.items()
        }
        profiles = {}
        if case.batch_size * case.ctx >= self.profile_from:
            for label in ("pristine", "patched"):
                engine = pair[label]
                tag = f"n{next_n}-{case.name}"
                engine.call({"op": "profile", "tag": tag, "steps": 3})
                engine.call(
                    {
                        "op": "generate",
                        "requests": [dict(r, max_new_tokens=6) for r in case.requests()],
                        "probe_window": False,
                        "mode": timed_mode,
                    }
                )
                profiles[label] = engine.call({"op": "read_profile", "tag": tag})["profile"]
        row = case_row(case, next_n, runs, profiles, self.skip, self.row_labels, greedy, acceptance)
        if row["divergences"] and self.margins:
            row["margins"] = self.divergence_margins(pair, case, row["divergences"])
        self.rows.append(row)
        self.save()
        p, x = row["pristine"], row["patched"]
        aa = row["aa_noise_processes"] or row["aa_noise"] or {}
        log(
            f"n={next_n} {case.name} (acceptance {acceptance or 'greedy'}): verify {fmt(p['verify_step_us'])} -> "
            f"{fmt(x['verify_step_us'])} us ({fmt(row['speedup_verify'], 3)}x, A/A {fmt(aa.get('verify'), 3)}), "
            f"TPOT {fmt(p['tpot_ms'], 2)} -> {fmt(x['tpot_ms'], 2)} ms ({fmt(row['speedup_tpot'], 3)}x, "
            f"A/A {fmt(aa.get('tpot'), 3)} {row['aa_noise_kind']}; mean of runs "
            f"{fmt(row['speedup_tpot_mean_of_runs'], 3)}x, A/A {fmt(aa.get('tpot_mean_of_runs'), 3)}), "
            f"tokens/s {fmt(p['tokens_per_s'])} -> "
            f"{fmt(x['tokens_per_s'])}, step GPU {fmt(_part(p['parts'], 'step', 'gpu_ms'), 2)} -> "
            f"{fmt(_part(x['parts'], 'step', 'gpu_ms'), 2)} ms (A/A {fmt(aa.get('step_gpu'), 3)}), "
            f"draft {fmt(_part(p['parts'], 'draft', 'gpu_ms'), 2)} -> {fmt(_part(x['parts'], 'draft', 'gpu_ms'), 2)}, "
            f"verify part {fmt(_part(p['parts'], 'verify', 'gpu_ms'), 2)} -> {fmt(_part(x['parts'], 'verify', 'gpu_ms'), 2)}, "
            f"draft-extend {fmt(_part(p['parts'], 'draft_extend', 'gpu_ms'), 2)} -> "
            f"{fmt(_part(x['parts'], 'draft_extend', 'gpu_ms'), 2)} ms GPU, host gap "
            f"{fmt(_part(p['parts'], 'step', 'host_gap_ms'), 2)} -> {fmt(_part(x['parts'], 'step', 'host_gap_ms'), 2)} ms; "
            f"identical {row['tokens_identical']}, verify positions identical {row['verify_positions_identical']}, "
            f"patched rows {x['layouts']}"
        )

    def divergence_margins(self, pair: dict, case: Case, divergences: list) -> list:
        runs = {
            label: engine.call({"op": "generate", "requests": case.requests(top_logprobs=True), "probe_window": False})
            for label, engine in pair.items()
        }
        out = []
        for d in divergences[:8]:
            p = runs["pristine"]["outputs"][d["request"]]
            x = runs["patched"]["outputs"][d["request"]]
            again = first_divergence(p["output_ids"], x["output_ids"])
            out.append(
                {
                    **d,
                    "diverges_again_at": again,
                    "pristine_margin": logit_margin(p.get("top_logprobs", []), d["position"]),
                }
            )
        return out

    def run_seed_case(self, next_n: int) -> None:
        """IndexShare on (GLM-5's flag): staggered arrivals and lengths, so batches merge and filter."""
        model_dir = engine_model.write_model(
            self.workdir / f"model-{self.layers}l-share", self.layers, index_share=True
        )
        pair = self.start_engines(model_dir, next_n, f"seed-n{next_n}", ("pristine", "patched"))
        try:
            rng = random.Random("seed-case")
            requests = [
                {
                    "prompt": [200 + i, rng.randint(1024, 8192)],
                    "max_new_tokens": rng.randint(8, 48),
                    "delay_s": round(rng.uniform(0, 1.5), 3),
                }
                for i in range(24)
            ]
            runs = {label: engine.call({"op": "generate", "requests": requests}) for label, engine in pair.items()}
            fraction, divergences = compare_outputs(runs["pristine"]["outputs"], runs["patched"]["outputs"])
            case = {
                "next_n": next_n,
                "requests": len(requests),
                "arrivals_s": [0, 1.5],
                "new_tokens": [8, 48],
                "prompt_tokens": [1024, 8192],
                "tokens_identical": fraction,
                "divergences": divergences[:16],
                "draft_loops": {label: run.get("draft_loops") for label, run in runs.items()},
                "tpot_ms": {label: tpot_ms([run]) for label, run in runs.items()},
                "step_parts": {label: step_parts([run], None, 0) for label, run in runs.items()},
                "verify_forwards": {label: len(run.get("verify", [])) for label, run in runs.items()},
            }
            self.seed_cases.append(case)
            self.save()
            log(f"seed case n{next_n}: identical {fraction}, draft loops {case['draft_loops']}")
        finally:
            for engine in pair.values():
                engine.stop()


VERSION_GATE_SKIPPED = "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"


def row_labels(meta: dict) -> dict:
    """What every row of a run carries about how it ran: its line, its parallel layout, and whether
    sglang's sglang-kernel version gate was passed over (0.5.23 on the box's older sglang-kernel)."""
    return {
        "line": meta["line"],
        "parallel": meta.get("parallel", "tp1"),
        "sgl_kernel_version_check_skipped": (meta.get("env") or {}).get(VERSION_GATE_SKIPPED) == "1",
        "kv_cache_dtype": (meta.get("engine_args") or {}).get("kv_cache_dtype"),
        "layers": (meta.get("model") or {}).get("num_hidden_layers"),
    }


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


def parallel_label(overrides: dict) -> str:
    """``tp1`` on one GPU; ``dp2`` with DP attention over 2 ranks; ``tp2`` for plain TP 2."""
    tp = int(overrides.get("tp_size", 1))
    if overrides.get("enable_dp_attention"):
        return f"dp{int(overrides.get('dp_size', tp))}"
    return f"tp{tp}"


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def log(message: str) -> None:
    print(f"[engine-ab {time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pristine", required=True, type=Path, help="folder holding the pristine sglang/ package")
    ap.add_argument("--patched", required=True, type=Path, help="folder holding the patched sglang/ package")
    ap.add_argument("--line", default="v0.5.14")
    ap.add_argument("--next-n", default="2,4", help="comma-separated next_n values (default 2,4)")
    ap.add_argument("--grid", default="full", choices=sorted(GRIDS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=4, help="runs per engine per case, ABBA order (default 4)")
    ap.add_argument("--skip", type=int, default=2, help="verify steps left out at the start of each run")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--profile-from", type=int, default=32 * 16384, help="profile cases with batch x context >= this")
    ap.add_argument("--margins", action="store_true", help="re-run a diverging case with top-2 logprobs")
    ap.add_argument(
        "--seed-case",
        default="",
        metavar="NEXT_N,...",
        help="also run the IndexShare case at these next_n (comma-separated)",
    )
    ap.add_argument("--deadline-s", type=float, default=540, help="stop starting new work after this many seconds")
    ap.add_argument("--min-block-s", type=float, default=120, help="time a next_n block needs before any has run")
    ap.add_argument(
        "--extra-path", default="", help="os.pathsep-separated folders after the tree (the bundle's packages)"
    )
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="environment for both engines")
    ap.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="K=JSON",
        help="an sglang.Engine argument for both engines (e.g. tp_size=2, enable_dp_attention=true)",
    )
    ap.add_argument(
        "--kv-cache", default="bfloat16", choices=sorted(KV_CACHES), help="the KV cache and the DSA backends reading it"
    )
    ap.add_argument(
        "--acceptance",
        default="",
        metavar="N:LEN,...",
        help="timed runs with sglang's SGLANG_SIMULATE_ACC_LEN at LEN for next_n N (e.g. 4:3,6:4); greedy otherwise",
    )
    ap.add_argument(
        "--two-process-aa", action="store_true", help="a second pristine engine process: the A/A floor of two processes"
    )
    ap.add_argument("--pin-cpus", action="store_true", help="each engine's processes on cores of their own")
    ap.add_argument("--series-record", type=Path, help="ci/apply_series.py's record of what the patched tree carries")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--command", help="the command line to record")
    ap.add_argument("--worker-script", type=Path, default=HERE / "engine_worker.py", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    env = dict(item.split("=", 1) for item in args.env)
    overrides = {
        **KV_CACHES[args.kv_cache],
        **{k: json.loads(v) for k, v in (item.split("=", 1) for item in args.engine_arg)},
    }
    acceptance = parse_acceptance(args.acceptance)
    sizing = sizing_for(GRIDS[args.grid], args.new_tokens, args.reps)
    if int(overrides.get("max_total_tokens", sizing.kv_tokens)) < sizing.needed_kv_tokens:
        print(
            f"engine_ab: --grid {args.grid} needs max_total_tokens >= {sizing.needed_kv_tokens} per engine (its prompt "
            f"pool and outputs); {overrides['max_total_tokens']} would evict pool prompts between runs",
            file=sys.stderr,
        )
        return 2
    labels = ("pristine", "pristine_b", "patched") if args.two_process_aa else ("pristine", "patched")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sglpatch-engine-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    next_ns = _ints(args.next_n)
    meta = {
        "line": args.line,
        "command": args.command or " ".join(sys.argv),
        "model": engine_model.dsa_config(args.layers),
        "engine_args": engine_args(Path("MODEL"), 0, sizing, overrides),
        "parallel": parallel_label(overrides),
        "series": json.loads(args.series_record.read_text()) if args.series_record else None,
        "grid": args.grid,
        "engines": list(labels),
        "acceptance": {str(k): v for k, v in acceptance.items()},
        "pinned_cpus": args.pin_cpus,
        "physical_cores": {
            str(cpu): list(core) for cpu, core in physical_cores(sorted(os.sched_getaffinity(0))).items()
        },
        "reps": args.reps,
        "skip_steps": args.skip,
        "new_tokens": args.new_tokens,
        "env": env,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": _versions(),
    }
    bench = Bench(
        trees={"pristine": args.pristine, "patched": args.patched},
        workdir=workdir,
        out=args.out,
        extra_path=[p for p in args.extra_path.split(os.pathsep) if p],
        env=env,
        layers=args.layers,
        reps=args.reps,
        skip=args.skip,
        new_tokens=args.new_tokens,
        deadline=time.time() + args.deadline_s,
        profile_from=args.profile_from,
        margins=args.margins,
        meta=meta,
        worker_script=args.worker_script,
        engine_overrides=overrides,
        sizing=sizing,
        labels=labels,
        acceptance=acceptance,
        pin_cpus=args.pin_cpus,
    )
    bench.save()
    status = 0
    for next_n in next_ns:
        needed_s = max(bench.block_s, default=args.min_block_s)
        if bench.left_s() < needed_s:
            bench.notes.append(
                f"next_n={next_n}: not run ({bench.left_s():.0f} s left before the deadline, a block took {needed_s:.0f} s)"
            )
            log(bench.notes[-1])
            continue
        try:
            bench.run_next_n(next_n, GRIDS[args.grid])
        except Exception as exc:
            status = 1
            bench.notes.append(f"next_n={next_n}: {type(exc).__name__}: {exc}"[:4000])
            log(bench.notes[-1])
        bench.save()
    for next_n in _ints(args.seed_case):
        if bench.left_s() < SEED_CASE_S:
            bench.notes.append(
                f"seed case n{next_n}: not run ({bench.left_s():.0f} s left before the deadline, it needs {SEED_CASE_S} s)"
            )
            log(bench.notes[-1])
            continue
        try:
            bench.run_seed_case(next_n)
        except Exception as exc:
            status = 1
            bench.notes.append(f"seed case n{next_n}: {type(exc).__name__}: {exc}"[:4000])
            log(bench.notes[-1])
    bench.save()
    return status


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in (
        "torch",
        "sgl-deep-gemm",
        "sglang-kernel",
        "sgl-flash-mla",
        "flashinfer-python",
        "triton",
        "transformers",
        "xgrammar",
    ):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:
        out["gpu"] = None
    return out


if __name__ == "__main__":
    raise SystemExit(main())
