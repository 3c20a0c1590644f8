"""What one engine's runs measured, from the worker's answers and the probe's records (pure functions).

A run is one ``generate`` answer of bench/engine_worker.py: its outputs (ids, streamed chunks, TPOT),
its output tokens/s, and the probe's records that fell in its window (``verify``: one per
TARGET_VERIFY forward; ``steps``: one per part of each decode step).
"""

from __future__ import annotations

import statistics

STEP_PARTS = ("step", "draft", "verify", "draft_extend")

# Kernels of the indexer's top-k step inside a verify forward, by name (DeepGEMM's paged-MQA
# logits, the Triton single-read kernel of the v0.5.14 line's patch 5, the top-k transforms).
INDEXER_KERNELS = {
    "paged_mqa_logits": lambda n: "paged_mqa_logits" in n and "metadata" not in n,
    "single_read": lambda n: "single_read" in n,
    "topk": lambda n: "topk" in n.lower(),
}


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


def step_gaps_ms(runs: list[dict], batch_size: int, skip: int) -> list[float]:
    """Wall time from one verify forward's start to the next, in the scheduler, every step of these
    runs (the first ``skip`` of each left out)."""
    gaps = []
    for run in runs:
        starts = sorted(r["t"] for r in run.get("verify", []) if r["batch_size"] == batch_size)[skip:]
        gaps += [(b - a) * 1000.0 for a, b in zip(starts, starts[1:], strict=False)]
    return gaps


def step_interval_ms(runs: list[dict], batch_size: int, skip: int) -> float | None:
    """The median step gap: with dummy weights every step yields one token per request, so this is the
    engine's own time per output token, free of the streaming path's noise."""
    gaps = step_gaps_ms(runs, batch_size, skip)
    return statistics.median(gaps) if gaps else None


def step_interval_ms_per_run(runs: list[dict], batch_size: int, skip: int) -> list[float | None]:
    """Each run's own median step gap, in run order: the host's speed is drawn run by run, so the runs
    are the draws a floor's precision counts (bench/engine/precision.py)."""
    return [step_interval_ms([run], batch_size, skip) for run in runs]


PERCENTILES = (10, 50, 90, 99)


def step_interval_percentiles(runs: list[dict], batch_size: int, skip: int) -> dict | None:
    """The step gaps' 10th, 50th, 90th and 99th percentiles: where runs fall into a fast and a slow
    mode, the tail shows what the median hides."""
    gaps = step_gaps_ms(runs, batch_size, skip)
    if len(gaps) < 2:
        return None
    cuts = statistics.quantiles(gaps, n=100, method="inclusive")
    return {f"p{p}": cuts[p - 1] for p in PERCENTILES}


def streaming_span(run: dict) -> tuple[float, float] | None:
    """The wall time in which every request of the run was decoding: from the moment the last of them had
    its first decode step's tokens (its second chunk) to the moment the first of them had its last (None
    where they never all decoded at once). Before it some requests are still in their prefill: at 32 x 64k
    the earliest first token came 0.11-0.20 s before the batch's first decode step
    (results/engine_h200_floor64k_same_layout.json)."""
    chunks = [o["chunks"] for o in run.get("outputs", []) if o.get("chunks")]
    if not chunks or any(len(c) < 2 for c in chunks):
        return None
    start, end = max(c[1][0] for c in chunks), min(c[-1][0] for c in chunks)
    return (start, end) if end > start else None


def _tokens_at(chunks: list, t: float) -> float:
    """Completion tokens a request had streamed by wall time ``t``, each chunk's tokens spread evenly over the
    time since the chunk before it: tokens come a whole step's worth at once, and a count that jumped as a
    window's edge crossed one would move a short window's rate by a step in ten."""
    before = None
    for at, n in chunks:
        if at <= t:
            before = (at, n)
            continue
        if before is None:
            return 0.0
        return before[1] + (n - before[1]) * (t - before[0]) / (at - before[0])
    return float(before[1]) if before else 0.0


def tokens_per_s_window_runs(runs: list[dict], window_s: float | None) -> list[float | None]:
    """Each run's output tokens per second over ``window_s`` from the start of its streaming span (every
    request decoding; streaming_span), in run order (None for a run without one, or whose span is shorter than
    the window: rows.fixed_window_s leaves such runs out)."""
    rates: list[float | None] = []
    for run in runs:
        span = streaming_span(run)
        if span is None or not window_s or span[1] - span[0] < window_s:
            rates.append(None)
            continue
        chunks = [o["chunks"] for o in run["outputs"] if o.get("chunks")]
        start = span[0]
        tokens = sum(_tokens_at(c, start + window_s) - _tokens_at(c, start) for c in chunks)
        rates.append(tokens / window_s)
    return rates


def tokens_per_s_window(runs: list[dict], window_s: float | None) -> float | None:
    """Output tokens per second over the same wall time in every run (``window_s`` from the moment every
    request of the run decodes), the median over runs: a rate no run's length, prefill or tail moves."""
    rates = [r for r in tokens_per_s_window_runs(runs, window_s) if r is not None]
    return statistics.median(rates) if rates else None


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


def part_value(parts: dict, part: str, what: str) -> float | None:
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


def host_per_run(runs: list[dict], batch_size: int, skip: int) -> list[dict]:
    """Each run's host, in run order: its draft loop's median host time (the same Python code in every
    engine, so a measure of the host's speed in that run), the share of its steps' host time the
    scheduler thread spent on a CPU (``cpu_ms`` over ``host_ms``: below 1 it waited), the vCPUs its
    steps ended on, and what the driver read from /proc/stat around the run (bench/host_cpus.py)."""
    out = []
    for run in runs:
        draft = part_records(run, "draft", batch_size, skip)
        share, cpus = steps_on_cpu(part_records(run, "step", batch_size, skip))
        out.append(
            {
                "draft_host_ms": statistics.median(r["host_ms"] for r in draft) if draft else None,
                "step_on_cpu_share": share,
                "step_cpus": cpus,
                "host_cpus": run.get("host_cpus"),
                # the run's wall-clock span, in the probe records' clock: what a later reading of the
                # engine's logs cuts its records by (bench/studies/host_modes.py)
                "window": [run["t_start"], run["t_end"]] if "t_start" in run else None,
                # where a run's time outside its decode steps goes: its prompts' ids handed over, and
                # the first token of any request after the run's start
                "prompt_s": run.get("prompt_s"),
                "first_token_s": first_token_s(run),
            }
        )
    return out


def first_token_s(run: dict) -> float | None:
    firsts = [o["chunks"][0][0] for o in run.get("outputs", []) if o.get("chunks")]
    return min(firsts) - run["t_start"] if firsts and "t_start" in run else None


def steps_on_cpu(steps: list[dict]) -> tuple[float | None, list[int]]:
    """The share of the steps' host time the scheduler thread was on a CPU (None where no record has
    ``cpu_ms``: the probe's records before 4 Dec 2026, the fourth session), and the vCPUs they ended on."""
    with_cpu = [r for r in steps if r.get("cpu_ms") is not None]
    host_ms = sum(r["host_ms"] for r in with_cpu)
    share = sum(r["cpu_ms"] for r in with_cpu) / host_ms if host_ms else None
    return share, sorted({r["cpu"] for r in with_cpu if r.get("cpu") is not None})


def tokens_per_s(runs: list[dict]) -> float | None:
    values = [run["tokens_per_s"] for run in runs if run.get("tokens_per_s")]
    return statistics.median(values) if values else None


def layouts_seen(runs: list[dict], batch_size: int) -> list[str]:
    seen = set()
    for run in runs:
        for r in run.get("verify", []):
            if r["batch_size"] == batch_size:
                seen.add(f"{r.get('layout') or '-'} {r.get('ctx_lens_2d')} {'graph' if r.get('graph') else 'eager'}")
    return sorted(seen)


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
