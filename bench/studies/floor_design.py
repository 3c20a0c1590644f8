"""How the next floor call should spend its device time: the host speed's structure in time, a model of it,
and the A/A floor's expected 95% interval for each design (issue 47, item 6).

The A/A floor is the ratio of two pristine engine processes' run means (docs/engine-benchmark.md, "A floor
with its interval"). Its interval is set by how a run's host speed varies. This reads the committed probe
records of engine calls (each engine's ``steps.jsonl`` in ``X_engines.tar.gz``, the runs cut and checked
against ``X.json`` by bench/studies/host_modes.py) and answers three things, no GPU needed:

1. the speed's structure in time: within a run (the step intervals' autocorrelation, the run's quarters
   against each other, how a run's mean spreads over its first k steps), between runs by their start-to-start
   gap (on the same vCPU or another), over the call (blocks of rounds), and around a pause inside a run;
2. a model fitted on one call (``--fit``): a run's log step interval is a per-run draw, an AR(1) wander
   within the run and white noise per step; with the run's cost (a fixed overhead plus its steps) it gives
   the expected half-width of the floor's 95% interval for other designs (new tokens per run, pairing the two
   processes within a round, TPOT beside the step interval), checked against the other calls;
3. the measures users read, computed on each call with intervals that count runs, not steps.

    python bench/studies/floor_design.py --fit 2 \\
        docs/results/engine_h100_floor64k_run1_engines.tar.gz:34:14:32 \\
        docs/results/engine_h100_floor64k_run2_engines.tar.gz:79:15:32 \\
        docs/results/engine_h100_long_n4_engines.tar.gz:40:15:8

Each archive is ``PATH:ROUNDS:MIN_STEPS:BATCH`` (host_modes' ``--reps``, ``--min-steps``, ``--batch-size``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.engine.precision import ratio_interval, t_975  # noqa: E402
from bench.studies import host_modes  # noqa: E402

PAIR = ("pristine", "pristine_b")
GAP_BINS_S = ((0.0, 1.2), (1.2, 2.0), (2.0, 2.8), (2.8, 4.0), (4.0, 6.0), (6.0, 10.0), (10.0, 30.0))
FIRST_K = (2, 4, 8)


# ---- reading ---------------------------------------------------------------------------------------------


def load_call(archive: str, rounds: int, min_steps: int, batch_size: int, skip: int = 2) -> dict:
    """One call's timed runs of every engine (host_modes' cut, checked against the call's JSON), each with its
    step intervals and draft host times step by step (logs), its vCPU, and its TPOT where the row has it."""
    result = host_modes.study(archive, batch_size, skip, min_steps, 2.0, rounds)[0]
    records = host_modes.read_steps(archive)
    row = _row(archive, batch_size)
    runs = {}
    for label, engine in result["engines"].items():
        tpots = ((row or {}).get(label) or {}).get("tpot_ms_runs") or [None] * len(engine["runs"])
        series = _series_by_start(records[label], batch_size)
        runs[label] = [
            _run(label, i, summary, series[summary["t"]], tpot)
            for i, (summary, tpot) in enumerate(zip(engine["runs"], tpots, strict=True))
        ]
    pieces = {label: host_modes.split_runs(records[label], "step", batch_size) for label in runs}
    return {"name": Path(archive).name.removesuffix("_engines.tar.gz"), "runs": runs, "row": row, "pieces": pieces}


def _row(archive: str, batch_size: int) -> dict | None:
    beside = host_modes.engine_json_beside(archive)
    if not beside:
        return None
    rows = [r for r in json.loads(beside.read_text())["rows"] if r["batch_size"] == batch_size]
    return rows[0] if rows else None


def _series_by_start(records: list[dict], batch_size: int) -> dict[float, tuple[list[dict], list[dict]]]:
    """Each step record's start time -> the rest of its run's step and draft records from that step on (the runs
    cut where the records pause, as host_modes cuts them)."""
    out = {}
    steps = host_modes.split_runs(records, "step", batch_size)
    drafts = host_modes.split_runs(records, "draft", batch_size)
    for step_run, draft_run in zip(steps, drafts, strict=False):
        for k, record in enumerate(step_run):
            out[record["t"]] = (step_run[k:], draft_run[k:], step_run)
    return out


def _run(label: str, index: int, summary: dict, series: tuple, tpot: float | None) -> dict:
    steps, drafts, whole = series
    starts = [r["t"] for r in steps]
    cpus = summary.get("cpus") or []
    return {
        "engine": label,
        "index": index,  # its place in the engine's runs: its round
        "t": starts[0],
        "vcpu": cpus[0] if len(cpus) == 1 else None,
        "iv": [math.log((b - a) * 1000.0) for a, b in zip(starts, starts[1:], strict=False)],
        "draft": [math.log(r["host_ms"]) for r in drafts],
        "span_s": whole[-1]["t"] - whole[0]["t"],
        "tpot_ms": tpot,
        "records": whole,
    }


def centred(runs: list[dict], key: str = "iv") -> list[list[float]]:
    """Each run's series less the engine's mean at each step position (so engines, calls and the steps' place
    in a run do not count)."""
    width = min(len(r[key]) for r in runs)
    means = [statistics.fmean(r[key][i] for r in runs) for i in range(width)]
    return [[v - m for v, m in zip(r[key][:width], means, strict=False)] for r in runs]


def pair_series(call: dict, key: str = "iv") -> list[list[float]]:
    return [s for label in PAIR for s in centred(call["runs"][label], key)]


# ---- 1. structure in time ------------------------------------------------------------------------------------


def within_run(series: list[list[float]]) -> dict:
    """How a run's steps vary around the run: the spread of run means and of steps around them, the residuals'
    lag-1 autocorrelation, the quarters' means against each other across runs, and the spread of a run's mean
    over its first k steps."""
    means = [statistics.fmean(s) for s in series]
    resid = [[v - m for v in s] for s, m in zip(series, means, strict=True)]
    lag1 = _corr([a for r in resid for a in r[:-1]], [b for r in resid for b in r[1:]])
    quarters = [[statistics.fmean(part) for part in _split(s, 4)] for s in series]
    q = list(zip(*quarters, strict=True))
    first_k = {}
    for k in (*FIRST_K, len(series[0])):
        head = [statistics.fmean(s[:k]) for s in series]
        first_k[k] = statistics.pstdev(head)
    return {
        "runs": len(series),
        "steps": len(series[0]),
        "sd_run_mean": statistics.pstdev(means),
        "sd_step_in_run": statistics.pstdev([v for r in resid for v in r]),
        "lag1": lag1,
        "quarters_adjacent": statistics.fmean(_corr(q[i], q[i + 1]) for i in range(3)),
        "quarters_first_last": _corr(q[0], q[3]),
        "sd_first_k": first_k,
    }


def _split(values: list[float], parts: int) -> list[list[float]]:
    size, extra = divmod(len(values), parts)
    out, at = [], 0
    for i in range(parts):
        n = size + (i < extra)
        out.append(values[at : at + n])
        at += n
    return out


def _corr(xs, ys) -> float | None:
    xs, ys = list(xs), list(ys)
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(xs, ys)


def run_speeds(call: dict) -> list[dict]:
    """Every engine's runs in time order, each with its mean log step interval less its engine's mean."""
    out = []
    for runs in call["runs"].values():
        series = centred(runs)
        out += [{**r, "speed": statistics.fmean(s)} for r, s in zip(runs, series, strict=True)]
    return sorted(out, key=lambda r: r["t"])


def by_gap(call: dict, shuffles: int = 500, seed: int = 0) -> list[dict]:
    """The correlation of two runs' speeds by their start-to-start gap, for pairs on the same vCPU and on two
    vCPUs, with how often the runs' speeds dealt to them at random correlate as much (one-sided)."""
    runs = run_speeds(call)
    pairs: dict[tuple, list[tuple[int, int]]] = {}
    for i, a in enumerate(runs):
        for j in range(i + 1, len(runs)):
            gap = runs[j]["t"] - a["t"]
            if gap >= GAP_BINS_S[-1][1]:
                break
            if a["vcpu"] is None or runs[j]["vcpu"] is None:
                continue
            kind = "same vCPU" if a["vcpu"] == runs[j]["vcpu"] else "two vCPUs"
            span = next(b for b in GAP_BINS_S if b[0] <= gap < b[1])
            pairs.setdefault((kind, span), []).append((i, j))
    speeds = [r["speed"] for r in runs]
    rng = random.Random(seed)
    dealt = [rng.sample(speeds, len(speeds)) for _ in range(shuffles)]
    out = []
    for (kind, span), ij in sorted(pairs.items()):
        found = _pair_corr(speeds, ij)
        if found is None or len(ij) < 6:
            continue
        as_high = sum((_pair_corr(d, ij) or 0.0) >= found for d in dealt) / shuffles
        out.append({"kind": kind, "gap_s": span, "pairs": len(ij), "correlation": found, "p": as_high})
    return out


def _pair_corr(values: list[float], ij: list[tuple[int, int]]) -> float | None:
    return _corr([values[i] for i, _ in ij], [values[j] for _, j in ij])


def drift(call: dict, blocks: tuple = (2, 4, 8)) -> list[dict]:
    """A slow change of the whole box over the call: the spread of the means of consecutive blocks of rounds
    (every engine's runs in them) against what independent runs would give."""
    speeds = [r["speed"] for r in run_speeds(call)]
    engines = len(call["runs"])
    out = []
    for rounds in blocks:
        size = rounds * engines
        means = [statistics.fmean(speeds[i : i + size]) for i in range(0, len(speeds) - size + 1, size)]
        if len(means) > 2:
            out.append(
                {
                    "rounds": rounds,
                    "blocks": len(means),
                    "sd": statistics.pstdev(means),
                    "independent": statistics.pstdev(speeds) / math.sqrt(size),
                }
            )
    return out


def pauses(call: dict, most_s: float = 1.0) -> list[dict]:
    """A timed run whose step records began with a short piece (fewer than 3 steps) then paused (the records cut
    in two within ``most_s``): the pause, the piece's host time, and where the run's speed after the pause falls
    among its engine's runs (rank 1 the fastest)."""
    out = []
    for label, runs in call["runs"].items():
        speeds = sorted(statistics.fmean(s) for s in centred(runs))
        after = {r["records"][0]["t"]: s for r, s in zip(runs, centred(runs), strict=True)}
        pieces = call["pieces"][label]
        for piece, nxt in zip(pieces, pieces[1:], strict=False):
            gap = nxt[0]["t"] - piece[-1]["t"]
            if len(piece) >= 3 or gap > most_s or nxt[0]["t"] not in after:
                continue
            mine = statistics.fmean(after[nxt[0]["t"]])
            out.append(
                {
                    "engine": label,
                    "steps_before": len(piece),
                    "host_ms_before": sum(r["host_ms"] for r in piece),
                    "pause_ms": gap * 1000.0,
                    "speed_after": math.exp(mine),
                    "rank_after": sum(v <= mine for v in speeds),
                    "of": len(speeds),
                }
            )
    return out


# ---- 2. a model and the designs ------------------------------------------------------------------------------


def autocovariance(series: list[list[float]], lags: int) -> list[float]:
    """The steps' autocovariance within runs at lags 0..lags, the series centred on their engine's mean."""
    out = []
    for h in range(lags + 1):
        products = [s[i] * s[i + h] for s in series for i in range(len(s) - h)]
        out.append(statistics.fmean(products))
    return out


def fit_model(series: list[list[float]]) -> dict:
    """A run's log step intervals as a per-run draw (variance ``draw``), an AR(1) wander within the run
    (``wander``, coefficient ``phi`` per step) and white noise per step (``white``), fitted to the steps'
    autocovariance within runs by least squares (phi on a grid, the variances linear and not negative)."""
    lags = len(series[0]) - 1
    cov = autocovariance(series, lags)
    best = None
    for phi in (i / 100 for i in range(0, 99)):
        fit = _fit_at(cov, phi)
        if fit and (best is None or fit["sse"] < best["sse"]):
            best = fit
    return best


def _fit_at(cov: list[float], phi: float) -> dict | None:
    """Least squares of cov[h] = draw + wander * phi**h + white * [h == 0], each variance at least 0 (the few
    subsets of them tried in turn)."""
    rows = [(1.0, phi**h, 1.0 if h == 0 else 0.0) for h in range(len(cov))]
    best = None
    for keep in ((0, 1, 2), (0, 2), (0, 1), (1, 2), (0,)):
        coef = _least_squares([[r[k] for k in keep] for r in rows], cov)
        if coef is None or any(c < 0 for c in coef):
            continue
        full = [0.0, 0.0, 0.0]
        for k, c in zip(keep, coef, strict=True):
            full[k] = c
        sse = sum((c - sum(f * x for f, x in zip(full, r, strict=True))) ** 2 for c, r in zip(cov, rows, strict=True))
        if best is None or sse < best["sse"]:
            best = {"draw": full[0], "wander": full[1], "white": full[2], "phi": phi, "sse": sse}
    return best


def _least_squares(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve the normal equations (a few columns) by Gauss-Jordan elimination."""
    n = len(a[0])
    m = [
        [sum(r[i] * r[j] for r in a) for j in range(n)] + [sum(r[i] * y for r, y in zip(a, b, strict=True))]
        for i in range(n)
    ]
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[pivot][c]) < 1e-15:
            return None
        m[c], m[pivot] = m[pivot], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def run_mean_var(model: dict, k: int) -> float:
    """The variance of a run's mean log step interval over k steps under the model."""
    phi = model["phi"]
    ar = sum(phi ** abs(i - j) for i in range(k) for j in range(k)) / (k * k)
    return model["draw"] + model["wander"] * ar + model["white"] / k


def run_cost(call: dict) -> dict:
    """What a run costs in wall time: the start-to-start gap of consecutive runs (every engine) is a fixed
    overhead plus the run's steps at the median step interval."""
    runs = sorted((r for rs in call["runs"].values() for r in rs), key=lambda r: r["t"])
    gaps = [b["t"] - a["t"] for a, b in zip(runs, runs[1:], strict=False)]
    steps = statistics.median(len(r["records"]) for r in runs)
    step_s = statistics.median(math.exp(v) for r in runs for v in r["iv"]) / 1000.0
    per_run = statistics.median(gaps)
    return {"per_run_s": per_run, "step_s": step_s, "records": steps, "overhead_s": per_run - (steps - 1) * step_s}


def pair_correlation(call: dict) -> float | None:
    """The two pristine processes' run speeds within a round (their runs of one round, in either order)."""
    a, b = (centred(call["runs"][label]) for label in PAIR)
    return _corr([statistics.fmean(s) for s in a], [statistics.fmean(s) for s in b])


def tpot_extra(call: dict, new_tokens: int) -> dict | None:
    """What TPOT holds beyond the engine's steps: a run's streamed span (TPOT x (new tokens - 1)) less its steps at
    its own step interval (ms): the first step's wait and the client's path. Fitted as ``mean_ms`` x exp(``slope``
    x the run's speed) plus noise of ``sd_ms`` (the run's speed: its mean log step interval less the engine's),
    taken as the same whatever the run's length (a model). From the first pristine process, the only one whose
    rows keep each run's TPOT."""
    runs = [r for r in call["runs"]["pristine"] if r["tpot_ms"]]
    if len(runs) < 3:
        return None
    speeds = [
        statistics.fmean(s)
        for s, r in zip(centred(call["runs"]["pristine"]), call["runs"]["pristine"], strict=True)
        if r["tpot_ms"]
    ]
    extra = [
        r["tpot_ms"] * (new_tokens - 1) - (len(r["records"]) - 1) * math.exp(statistics.fmean(r["iv"])) for r in runs
    ]
    logs = [math.log(max(e, 1.0)) for e in extra]
    slope = statistics.linear_regression(speeds, logs).slope
    mean_ms = math.exp(statistics.fmean(logs))
    resid = [e - mean_ms * math.exp(slope * x) for e, x in zip(extra, speeds, strict=True)]
    return {"mean_ms": mean_ms, "slope": slope, "sd_ms": statistics.pstdev(resid)}


def design(model: dict, cost: dict, device_s: float, new_tokens: int, acceptance: int, skip: int = 2) -> dict:
    """Runs a side and the variance of one run's log step interval for one design (three engines a round)."""
    steps = new_tokens // acceptance  # decode steps a run
    timed = max(steps - skip, 0)  # step intervals after the skipped steps
    per_run = cost["overhead_s"] + steps * cost["step_s"]
    return {
        "new_tokens": new_tokens,
        "timed_intervals": timed,
        "per_run_s": per_run,
        "runs": int(device_s // (3 * per_run)),
        "run_var": run_mean_var(model, timed) if timed >= 2 else None,
        "steps": steps,
    }


def expected_half_width(
    plan: dict, model: dict, pair_rho: float, extra: dict | None, measure: str, sims: int, rng: random.Random
) -> float | None:
    """The mean half-width of the floor's 95% interval (sqrt(high/low) - 1) over simulated calls of the model:
    ``interval`` the step interval's ratio of run means (precision.ratio_interval), ``paired`` the mean of the
    rounds' log ratios (a t interval), ``tpot`` TPOT's ratio of run means with the client's extra span."""
    runs, var = plan["runs"], plan["run_var"]
    if var is None or runs < 3 or (measure == "tpot" and not extra):
        return None
    sd = math.sqrt(var)
    widths = []
    for _ in range(sims):
        a, b = _draw_pairs(runs, sd, pair_rho, rng)
        if measure == "paired":
            d = [x - y for x, y in zip(a, b, strict=True)]
            widths.append(math.exp(t_975(runs - 1) * statistics.stdev(d) / math.sqrt(runs)) - 1)
            continue
        if measure == "tpot":
            a, b = ([_tpot(x, plan, model, extra, rng) for x in side] for side in (a, b))
        else:
            a, b = [math.exp(x) for x in a], [math.exp(x) for x in b]
        low, high = ratio_interval(a, b)["ci95"]
        widths.append(math.sqrt(high / low) - 1)
    return statistics.fmean(widths)


def _draw_pairs(runs: int, sd: float, rho: float, rng: random.Random) -> tuple[list[float], list[float]]:
    a, b = [], []
    for _ in range(runs):
        shared, own_a, own_b = rng.gauss(0, 1), rng.gauss(0, 1), rng.gauss(0, 1)
        a.append(sd * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * own_a))
        b.append(sd * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * own_b))
    return a, b


def _tpot(log_speed: float, plan: dict, model: dict, extra: dict, rng: random.Random) -> float:
    """One run's TPOT (ms): its steps at its speed and the extra span (tpot_extra), over the tokens after the
    first."""
    span = plan["steps"] * model["step_ms"] * math.exp(log_speed)
    span += extra["mean_ms"] * math.exp(extra["slope"] * log_speed) + rng.gauss(0.0, extra["sd_ms"])
    return max(span, 1e-3) / (plan["new_tokens"] - 1)


RESAMPLED = ("run means", "p10", "p50", "p90", "tokens/s")


def resampled_design(call: dict, plan: dict, sims: int, rng: random.Random) -> dict[str, float] | None:
    """Calls of ``plan['runs']`` rounds drawn from ``call``'s rounds with replacement (the two processes' runs of
    a round kept together, each centred on its engine, so the floor is 1), each run cut to its first
    ``timed_intervals`` step gaps; per measure the half-width 1.96 x the spread of the log ratio over the drawn
    calls. No model: the runs' own spread and skew, for runs no longer than the call's."""
    k, runs = plan["timed_intervals"], plan["runs"]
    rounds = list(zip(*(centred(call["runs"][label]) for label in PAIR), strict=True))
    if k < 2 or k > len(rounds[0][0]) or runs < 3:
        return None
    logs: dict[str, list[float]] = {m: [] for m in RESAMPLED}
    for _ in range(sims):
        chosen = rng.choices(rounds, k=runs)
        a, b = ([[math.exp(v) for v in r[side][:k]] for r in chosen] for side in (0, 1))
        for name, stat in _stats().items():
            logs[name].append(math.log(stat(a) / stat(b)))
    return {name: math.exp(1.96 * statistics.pstdev(v)) - 1 for name, v in logs.items()}


def _stats() -> dict:
    return {
        "run means": lambda runs: statistics.fmean(statistics.median(r) for r in runs),
        "p10": lambda runs: _pct(runs, 10),
        "p50": lambda runs: _pct(runs, 50),
        "p90": lambda runs: _pct(runs, 90),
        "tokens/s": lambda runs: 1.0 / _rate(runs),
    }


# ---- 3. measures users read ----------------------------------------------------------------------------------


def user_measures(call: dict, boots: int, rng: random.Random) -> list[dict]:
    """The two pristine processes' ratio (first over second) for each measure, with a 95% interval whose
    unit is the run."""
    a, b = (call["runs"][label] for label in PAIR)
    out = []
    tpot = ((call["row"] or {}).get("aa_noise_processes") or {}).get("tpot_mean_of_runs_interval")
    if tpot:
        out.append(_measure("TPOT, ratio of run means (the row's own)", tpot["ratio"], *tpot["ci95"]))
    medians = [[math.exp(statistics.median(r["iv"])) for r in side] for side in (a, b)]
    found = ratio_interval(*medians)
    out.append(_measure("step interval, ratio of run medians' means", found["ratio"], *found["ci95"]))
    d = [math.log(x / y) for x, y in zip(*medians, strict=True)]
    half = t_975(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    mean = statistics.fmean(d)
    out.append(
        _measure(
            "step interval, paired by round (geometric mean)",
            math.exp(mean),
            math.exp(mean - half),
            math.exp(mean + half),
        )
    )
    gaps = [[[math.exp(v) for v in r["iv"]] for r in side] for side in (a, b)]
    for p in (10, 50, 90, 99):
        out.append(
            _boot(f"step gaps' p{p}, pooled (run-cluster bootstrap)", gaps, lambda s, p=p: _pct(s, p), boots, rng)
        )
    out.append(
        _boot(
            "tokens/s over all timed steps' wall time, pooled (run-cluster bootstrap)",
            gaps,
            _rate,
            boots,
            rng,
            invert=True,
        )
    )
    return out


def _measure(name: str, ratio: float, low: float, high: float) -> dict:
    return {"measure": name, "ratio": ratio, "ci95": [low, high], "within_3pct": 0.97 <= low and high <= 1.03}


def _pct(runs: list[list[float]], p: int) -> float:
    values = sorted(v for r in runs for v in r)
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _rate(runs: list[list[float]]) -> float:
    """Steps per second over the runs' timed wall time (tokens/s less the constant tokens per step)."""
    return sum(len(r) for r in runs) / sum(v for r in runs for v in r)


def _boot(name: str, sides: list, stat, boots: int, rng: random.Random, invert: bool = False) -> dict:
    """stat(first) / stat(second) (inverted for a rate, so that above 1 is the first process slower, as for a
    time), the 95% percentile interval from resampling each process's runs with replacement."""

    def ratio(x, y):
        return stat(y) / stat(x) if invert else stat(x) / stat(y)

    found = ratio(*sides)
    draws = sorted(ratio(*(rng.choices(s, k=len(s)) for s in sides)) for _ in range(boots))
    return _measure(name, found, draws[int(0.025 * boots)], draws[int(0.975 * boots) - 1])


# ---- output ---------------------------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_structure(call: dict, shuffles: int) -> None:
    print(f"\n== {call['name']}: {len(call['runs']['pristine'])} rounds ==")
    for key, what in (("iv", "log step interval"), ("draft", "log draft loop host time")):
        w = within_run(pair_series(call, key))
        first = ", ".join(f"{k}: {v:.3f}" for k, v in w["sd_first_k"].items())
        print(
            f"within a run ({what}, {w['runs']} runs of the two pristine processes, {w['steps']} steps): run means "
            f"spread {w['sd_run_mean']:.3f}, steps around their run's mean {w['sd_step_in_run']:.3f}; lag-1 "
            f"autocorrelation of those {_f(w['lag1'], 2)}; a run's quarters correlate {_f(w['quarters_adjacent'], 2)} "
            f"(adjacent) and {_f(w['quarters_first_last'], 2)} (first with last); the mean of the first k steps "
            f"spreads {first}"
        )
    print(
        "between runs (every engine, each run's mean log step interval less its engine's mean), by start-to-start gap:"
    )
    for g in by_gap(call, shuffles):
        print(
            f"  {g['kind']:9s} {g['gap_s'][0]:4.1f}-{g['gap_s'][1]:4.1f} s: correlation {g['correlation']:+.2f} over "
            f"{g['pairs']:4d} pairs (as high with speeds dealt at random: {g['p']:.2f})"
        )
    for d in drift(call):
        print(
            f"over the call: means of {d['blocks']} blocks of {d['rounds']} rounds spread {d['sd']:.3f}, "
            f"independent runs would {d['independent']:.3f}"
        )
    rho = pair_correlation(call)
    print(f"the two pristine processes' runs of one round: correlation {_f(rho, 2)}")
    for p in pauses(call):
        print(
            f"pause inside a run: {p['engine']}, {p['steps_before']} step(s) ({p['host_ms_before']:.0f} ms of host "
            f"time), then {p['pause_ms']:.0f} ms with no step; the run's speed after it {p['speed_after']:.3f}x of "
            f"the engine's mean (its step interval), rank {p['rank_after']} of {p['of']} (1 = fastest)"
        )


def report_model(fit_call: dict, calls: list[dict], args, rng: random.Random) -> dict:
    series = pair_series(fit_call)
    model = fit_model(series)
    cost = run_cost(fit_call)
    model["step_ms"] = cost["step_s"] * 1000.0
    extra = tpot_extra(fit_call, args.fit_new_tokens)
    print(
        f"\n== model, fitted on {fit_call['name']} (the two pristine processes' step intervals within runs) ==\n"
        f"log step interval = per-run draw (sd {math.sqrt(model['draw']):.3f}) + AR(1) within the run (sd "
        f"{math.sqrt(model['wander']):.3f}, {model['phi']:.2f} a step) + white noise a step (sd "
        f"{math.sqrt(model['white']):.3f}): a model, fitted to lags 0-{len(series[0]) - 1} of one run "
        f"(about {len(series[0]) * model['step_ms'] / 1000:.2f} s); beyond that it is extrapolation."
    )
    if extra:
        print(
            f"TPOT's span beyond the steps: {extra['mean_ms']:.0f} ms x exp({extra['slope']:.2f} x the run's log "
            f"speed), noise sd {extra['sd_ms']:.0f} ms (from pristine's runs, the only ones with a TPOT each)"
        )
    print("checked on each call (the spread of a run's mean over its first k steps; the floor's half-width):")
    for call in calls:
        _check(call, fit_call, model, extra, args, rng)
    return model


def _check(call: dict, fit_call: dict, model: dict, extra: dict, args, rng: random.Random) -> None:
    series = pair_series(call)
    seen = within_run(series)["sd_first_k"]
    cols = ", ".join(f"k={k}: {v:.3f} (model {math.sqrt(run_mean_var(model, k)):.3f})" for k, v in seen.items())
    found = ratio_interval(*([math.exp(statistics.fmean(s)) for s in centred(call["runs"][lab])] for lab in PAIR))
    runs, k = found["runs"][0], len(series[0])
    plan = {"runs": runs, "run_var": run_mean_var(model, k), "steps": k + 2, "new_tokens": args.fit_new_tokens}
    predicted = expected_half_width(plan, model, 0.0, extra, "interval", args.sims, rng)
    tpot = ((call["row"] or {}).get("aa_noise_processes") or {}).get("tpot_mean_of_runs_interval")
    tpot_seen = f"{math.sqrt(tpot['ci95'][1] / tpot['ci95'][0]) - 1:.3f}" if tpot else "-"
    tpot_model = expected_half_width(plan, model, 0.0, extra, "tpot", args.sims, rng)
    held = "held out" if call is not fit_call else "the fit's own"
    print(
        f"  {call['name']} ({held}): {cols}; step interval floor +-{_half(found):.3f} at {runs} runs a side (model "
        f"+-{predicted:.3f}), TPOT floor +-{tpot_seen} (model +-{_f(tpot_model)}, TPOT taken at {args.fit_new_tokens} "
        "new tokens)"
    )


def _half(interval: dict) -> float:
    return math.sqrt(interval["ci95"][1] / interval["ci95"][0]) - 1


def report_designs(model: dict, fit_call: dict, calls: list[dict], args, rng: random.Random) -> None:
    cost = run_cost(fit_call)
    rho = pair_correlation(fit_call) or 0.0
    extra = tpot_extra(fit_call, args.fit_new_tokens)
    print(
        f"\n== designs (costs from {fit_call['name']}: {cost['per_run_s']:.2f} s start to start at "
        f"{cost['records']:.0f} step records, {cost['overhead_s']:.2f} s of it fixed, {cost['step_s'] * 1000:.1f} ms "
        f"a step, taken as the same at other lengths; three engines a round; the pair's correlation in a round "
        f"{rho:.2f}) ==\n"
        "expected half-width of the floor's 95% interval. Resampled: rounds of the fit call drawn again, runs cut "
        "short (no model; none longer than its runs). Model: the fitted model (TPOT with its extra span)."
    )
    print(
        "device s  tokens  gaps  s/run  runs |  resampled: run means   p10    p50    p90  tokens/s |"
        "  model: interval  paired   TPOT"
    )
    for device_s in args.device_s:
        for tokens in args.new_tokens:
            plan = design(model, cost, device_s, tokens, args.acceptance)
            resampled = resampled_design(fit_call, plan, args.sims, rng) or {}
            modelled = [
                expected_half_width(plan, model, rho, extra, m, args.sims, rng) for m in ("interval", "paired", "tpot")
            ]
            print(
                f"{device_s:8.0f}  {tokens:6d}  {plan['timed_intervals']:4d}  {plan['per_run_s']:5.2f}  {plan['runs']:4d} |"
                + "".join(f"  {_pct_str(resampled.get(m)):>7s}" for m in RESAMPLED)
                + " |"
                + "".join(f"  {_pct_str(w):>7s}" for w in modelled)
            )
    print(
        "the resampled half-widths checked on the other calls (their own rounds and runs; observed from user_measures):"
    )
    for call in calls:
        if call is fit_call:
            continue
        plan = {"runs": len(call["runs"]["pristine"]), "timed_intervals": len(pair_series(call)[0])}
        predicted = resampled_design(fit_call, plan, args.sims, rng) or {}
        own = resampled_design(call, plan, args.sims, rng) or {}
        print(
            f"  {call['name']} at {plan['runs']} runs a side: "
            + ", ".join(f"{m} {_pct_str(predicted.get(m))} (its own rounds {_pct_str(own.get(m))})" for m in RESAMPLED)
        )


def _pct_str(width: float | None) -> str:
    return "-" if width is None else f"{100 * width:.1f}%"


def report_measures(calls: list[dict], boots: int, rng: random.Random) -> None:
    print("\n== measures users read: the two pristine processes' ratio, 95% interval with the run as unit ==")
    for call in calls:
        print(f"{call['name']} ({len(call['runs']['pristine'])} runs a side):")
        for m in user_measures(call, boots, rng):
            low, high = m["ci95"]
            mark = "within +-3%" if m["within_3pct"] else "not within +-3%"
            print(f"  {m['measure']}: {m['ratio']:.3f} [{low:.3f}-{high:.3f}], {mark}")


def parse_call(spec: str) -> tuple[str, int, int, int]:
    path, rounds, min_steps, batch = spec.rsplit(":", 3)
    return path, int(rounds), int(min_steps), int(batch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calls", nargs="+", type=parse_call, help="PATH_engines.tar.gz:ROUNDS:MIN_STEPS:BATCH")
    ap.add_argument("--fit", type=int, default=1, help="which call (1-based) the model is fitted on")
    ap.add_argument("--fit-new-tokens", type=int, default=48, help="the fit call's --new-tokens (for TPOT's extra)")
    ap.add_argument("--acceptance", type=int, default=3, help="tokens a step emits (--acceptance 4:3)")
    ap.add_argument("--device-s", type=lambda v: [float(x) for x in v.split(",")], default=[208.0, 330.0, 520.0])
    ap.add_argument("--new-tokens", type=lambda v: [int(x) for x in v.split(",")], default=[12, 24, 48, 96, 192])
    ap.add_argument("--sims", type=int, default=400, help="simulated calls per design")
    ap.add_argument("--shuffles", type=int, default=500)
    ap.add_argument("--boots", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 1 <= args.fit <= len(args.calls):
        ap.error(f"--fit: 1 to {len(args.calls)}")
    rng = random.Random(args.seed)
    calls = [load_call(*spec) for spec in args.calls]
    for call in calls:
        report_structure(call, args.shuffles)
    fit_call = calls[args.fit - 1]
    model = report_model(fit_call, calls, args, rng)
    report_designs(model, fit_call, calls, args, rng)
    report_measures(calls, args.boots, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
