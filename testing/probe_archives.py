"""An engine call's archive as bench/engine_ab.py leaves it, made from probe step records, for the studies
that read such archives (bench/studies/host_modes.py, floor_design.py), and a floor call, its JSON and its archive
(bench/studies/floor_measures.py, floor_pool.py)."""

from __future__ import annotations

import io
import json
import math
import random
import tarfile
from pathlib import Path


def steps_archive(path: Path, engines: dict[str, list[dict]]) -> str:
    """``path`` (a .tar.gz) holding ``probe-n4-<label>/steps.jsonl`` with each engine's records."""
    return probe_archive(path, engines, "steps.jsonl")


def probe_archive(path: Path, engines: dict[str, list[dict]], name: str) -> str:
    """``path`` (a .tar.gz) holding ``probe-n4-<label>/<name>`` with each engine's records."""
    with tarfile.open(path, "w:gz") as tar:
        for label, records in engines.items():
            data = "\n".join(json.dumps(r) for r in records).encode()
            info = tarfile.TarInfo(f"./probe-n4-{label}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


FLOOR_ROUNDS, FLOOR_STEPS, FLOOR_SKIP = 24, 17, 2  # a floor call's rounds, verify forwards a run, steps left out


def floor_call(
    folder: Path,
    step_ms: dict[str, float],
    row_step_off: float = 1.0,
    *,
    name: str = "call",
    seed: int = 3,
    patched_is_pristine: bool = False,
) -> Path:
    """A floor call ``folder/<name>.json`` and its archive beside it, one engine for each of ``step_ms``'s labels
    (pristine, patched, and pristine_b where a second pristine process ran): every run starts, streams its first
    token 0.15 s later, begins its first verify forward 0.1 s after that and one every ``step_ms`` x the run's
    speed (drawn per run from ``seed``), ends 0.04 s after its last. The row keeps pristine_b's TPOT as a row does,
    only as its interval against pristine; ``row_step_off`` scales the step intervals the row says its runs had."""
    from bench.engine.precision import ratio_interval

    rng = random.Random(seed)
    verify: dict[str, list[dict]] = {label: [] for label in step_ms}
    host: dict[str, list[dict]] = {label: [] for label in step_ms}
    intervals: dict[str, list[float]] = {label: [] for label in step_ms}
    t = 1000.0
    for _ in range(FLOOR_ROUNDS):
        for label in step_ms:
            gap = step_ms[label] * math.exp(rng.gauss(0.0, 0.1)) / 1000.0
            first = t + 0.25
            starts = [first + k * gap for k in range(FLOOR_STEPS)]
            verify[label] += [{"t": s, "batch_size": 32, "profiled": False} for s in starts]
            end = starts[-1] + 0.04
            host[label].append(
                {"window": [t, end], "prompt_s": 0.02, "first_token_s": 0.15, "step_cpus": [len(host[label]) % 3]}
            )
            intervals[label].append(gap * 1000.0)
            t = end + 0.2
    tpot = {label: [v / 3.0 for v in runs] for label, runs in intervals.items()}
    row = {"batch_size": 32, "ctx": 65536, "next_n": 4, "new_tokens": 48, "window_s": 0.2}
    row.update({"kv_cache_dtype": "fp8_e4m3", "simulated_acceptance": 3.0, "lengths": "uniform"})
    if "pristine_b" in step_ms:
        row["aa_noise_processes"] = {
            "tokens_per_s_window": 1.0,
            "tpot_mean_of_runs_interval": ratio_interval(tpot["pristine"], tpot["pristine_b"]),
        }
        row["host_runs_pristine_b"] = host["pristine_b"]
    for label in ("pristine", "patched"):
        row[label] = {
            "host_runs": host[label],
            "step_interval_ms_runs": [v * row_step_off for v in intervals[label]],
            "tpot_ms_runs": tpot[label],
            "tokens_per_s_window": 1000.0,
        }
    meta = {"skip_steps": FLOOR_SKIP, "engines": list(step_ms), "patched_is_pristine": patched_is_pristine}
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"meta": meta, "rows": [row]}))
    probe_archive(folder / f"{name}_engines.tar.gz", verify, "verify.jsonl")
    return path
