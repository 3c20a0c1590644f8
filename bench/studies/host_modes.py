"""Why a TPOT ratio moved where the code did not: each timed run's host mode, from an engine run's
probe records (issue 32).

On the H200 (a KVM guest with 16 vCPUs) the draft loop of sglang 0.5.23's engine ran in one of
two modes per timed run, in every engine alike: about 1.85 ms of GPU time, or 2.4-3.3 ms, with its
host time following (about 1.1-1.3 against 1.4-1.9 ms). The loop is a CUDA graph whose GPU time
includes the waits for the host's launches around it, so a slow host shows as GPU time. A median
over all of a case's runs then depends on how many runs each engine spent in each mode.

This reads the ``steps.jsonl`` records each engine's probe wrote (the ``probe-<tag>-<label>/``
folders of a run's ``engine_logs*.tar.gz``) and prints, per engine: every timed run's median draft
GPU time, its mode, its step GPU time and step interval; how many runs fell in each mode; and the
engines' ratios within each mode, which the mode mix does not move. A run is "fast" where its
median draft GPU time is below ``--fast-below`` (2.0 ms, set from the first v0.5.23 call's runs and
applied unchanged to the second and third). Each engine ran, case after case, ``--reps`` timed runs and one
untimed greedy run (engine_ab's order), so its runs are cut into cases of ``reps + 1`` and the
greedy run of each is left out; warm-up and profiling runs are shorter than ``--min-steps``. No GPU
is needed.

    python bench/studies/host_modes.py --reps 16 docs/results/engine_h200_tpot_v0_5_23_run2_engines.tar.gz

It also lists every engine's runs in time order, with how often a run shares the mode of the run
before it against how often it would by chance, and, given the run's JSON (``--engine-json``), each
engine's modes by the core group it ran on: with the groups going round the engines rep by rep
(``--pin-cpus`` since the third v0.5.23 call), that tells a state of the box from a trait of some
cores.

Where the run's JSON lies beside its archive (``X_engines.tar.gz`` and ``X.json``), each run cut here is
checked against the driver's own record of that run (its draft host time) and a mismatch refused: a pause of
the host inside a run once split one in two and the greedy run was counted as a timed one. Rows made since
5 Dec 2026 (the tenth session) record each run's window, and the runs are then cut by it.

It ends with how closely, run by run, the step interval follows the draft loop's host time (the same
code in every engine, so the host's speed in that run) over the timed runs of ``--link-engines``, each
taken relative to its engine's mean in its case; with records that have them, each run's share of its
steps' host time spent on a CPU and the vCPUs it ran on.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tarfile
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.engine.measures import part_records, step_parts, steps_on_cpu  # noqa: E402
from bench.engine.precision import ratio_interval  # noqa: E402

LABELS = ("pristine", "pristine_b", "patched")
RUN_GAP_S = 0.3  # steps of one run follow each other within milliseconds; runs are seconds apart
SHORT_RUNS = (4, 8)  # timed steps of a shorter run, cut from the start of each real one
# a run cut here and the same run as the driver cut it: their draft host times differ by less than this (2.6%
# seen at 1 request, where a record or two more at a run's end moves the median; a neighbouring run is 10-20% off)
DRIVER_MATCH = 0.05


def read_steps(archive: str) -> dict[str, list[dict]]:
    """Engine label -> its probe's step records, from a run's engine logs archive."""
    return read_probe_records(archive, "steps.jsonl")


def read_probe_records(archive: str | Path, name: str) -> dict[str, list[dict]]:
    """Engine label -> the records of its probe's file `name` (steps.jsonl, verify.jsonl), from a run's engine
    logs archive."""
    out: dict[str, list[dict]] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            if path.name != name or not path.parent.name.startswith("probe-"):
                continue
            label = path.parent.name.split("-", 2)[2]
            text = tar.extractfile(member).read().decode()
            out[label] = [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def split_runs(records: list[dict], part: str, batch_size: int, gap_s: float = RUN_GAP_S) -> list[list[dict]]:
    """One part's records at one batch size, in time order, cut into runs where time jumps."""
    chosen = sorted((r for r in records if r["part"] == part and r["batch_size"] == batch_size), key=lambda r: r["t"])
    runs: list[list[dict]] = []
    for record in chosen:
        if not runs or record["t"] - runs[-1][-1]["t"] > gap_s:
            runs.append([])
        runs[-1].append(record)
    return runs


def run_summaries(
    records: list[dict], batch_size: int, skip: int, min_steps: int, gap_s: float = RUN_GAP_S
) -> list[dict]:
    """Per run that the pauses in the records delimit (no engine JSON to go by): see run_summary. Runs
    shorter than ``min_steps`` (warm-up, profiling) are left out."""
    drafts = split_runs(records, "draft", batch_size, gap_s)
    steps = split_runs(records, "step", batch_size, gap_s)
    runs = [{"steps": draft + step} for draft, step in zip(drafts, steps, strict=False)]
    return [s for s in (run_summary(run, batch_size, skip) for run in runs) if s and s["timed_steps"] >= min_steps]


def run_summary(run: dict, batch_size: int, skip: int) -> dict | None:
    """One run's median draft GPU and host time, step GPU time (engine_ab's step parts) and step interval
    (ms), the first ``skip`` steps left out."""
    timed = part_records(run, "step", batch_size, skip)
    starts = [r["t"] for r in timed]
    if len(starts) < 2:
        return None
    parts = step_parts([run], batch_size, skip)
    intervals = [(b - a) * 1000.0 for a, b in zip(starts, starts[1:], strict=False)]
    return {
        "t": starts[0],
        "timed_steps": len(starts),
        "draft_gpu_ms": parts["draft"]["gpu_ms"],
        "draft_host_ms": parts["draft"]["host_ms"],
        "step_gpu_ms": parts["step"]["gpu_ms"],
        "step_interval_ms": statistics.median(intervals),
        # the same over the run's first few timed steps only: does a short run draw less of the host?
        "step_interval_ms_first": {k: statistics.median(intervals[:k]) for k in SHORT_RUNS},
        **on_cpu(timed),
    }


def engine_json_beside(archive: str) -> Path | None:
    """The run's engine JSON next to its logs archive (``X_engines.tar.gz`` -> ``X.json``), if there."""
    path = Path(archive)
    for suffix in ("_engines.tar.gz", "_engine_logs.tar.gz"):
        if path.name.endswith(suffix):
            beside = path.with_name(path.name[: -len(suffix)] + ".json")
            return beside if beside.is_file() else None
    return None


def driver_runs(engine_json: Path, batch_size: int) -> list[dict[str, list[dict]]] | None:
    """Per case at ``batch_size``, in order: engine label -> the driver's record of each timed run
    (``host_runs``); None where the JSON's rows have none (runs before 4 Dec 2026)."""
    rows = [row for row in json.loads(engine_json.read_text())["rows"] if row["batch_size"] == batch_size]
    cases = []
    for row in rows:
        runs = {label: (row.get(label) or {}).get("host_runs") for label in ("pristine", "patched")}
        runs["pristine_b"] = row.get("host_runs_pristine_b")
        cases.append({label: r for label, r in runs.items() if r})
    return cases if cases and all("pristine" in case for case in cases) else None


def cut_by_windows(records: list[dict], timed: list[dict], batch_size: int) -> list[dict]:
    """The records of each run the driver timed, cut by the run's window (its rows since 5 Dec 2026)."""
    at_size = [r for r in records if r["batch_size"] == batch_size]
    return [{"steps": [r for r in at_size if w[0] <= r["t"] <= w[1]]} for w in (run["window"] for run in timed)]


def _runs_by_windows(engines: dict, timed_by_case: list[dict], batch_size: int, skip: int) -> dict[str, list]:
    per_case: dict[str, list] = {label: [] for label in LABELS if label in engines}
    for case in timed_by_case:
        for label, cases in per_case.items():
            cut = cut_by_windows(engines[label], case.get(label, []), batch_size)
            cases.append([run_summary(run, batch_size, skip) for run in cut])
    return per_case


def _check_cases(archive: str, per_case: dict[str, list], timed_by_case: list[dict]) -> None:
    for k, case in enumerate(timed_by_case):
        for label, timed in case.items():
            if label in per_case:
                runs = per_case[label][k] if k < len(per_case[label]) else []
                check_against_driver(f"{archive}: {label}", k + 1, runs, timed)


def check_against_driver(label: str, case: int, runs: list[dict], timed: list[dict]) -> None:
    """Runs cut where the records pause are the driver's timed runs where each has the draft host time the
    driver recorded for it, within DRIVER_MATCH (a record or two at a run's end may fall to one cut and
    not the other); LookupError where not: a pause inside a run split it, or a greedy run was taken for a
    timed one, and every figure after it would pair the wrong runs."""
    if len(runs) != len(timed):
        raise LookupError(f"{label}, case {case}: {len(runs)} runs cut here, {len(timed)} timed by the driver")
    for i, (run, record) in enumerate(zip(runs, timed, strict=True)):
        if not math.isclose(run["draft_host_ms"], record["draft_host_ms"], rel_tol=DRIVER_MATCH):
            raise LookupError(
                f"{label}, case {case}, timed run {i + 1}: draft host {run['draft_host_ms']:.4f} ms as cut here, "
                f"{record['draft_host_ms']:.4f} ms in the driver's record: the runs are cut wrongly (a pause "
                "inside a run, or --min-steps or --run-gap-s for this archive)"
            )


def on_cpu(steps: list[dict]) -> dict:
    """The run's share of its steps' host time on a CPU and the vCPUs they ended on, where its records
    have them (bench/engine/measures.py steps_on_cpu); nothing for older records."""
    share, cpus = steps_on_cpu(steps)
    return {} if share is None else {"on_cpu_share": share, "cpus": cpus}


def relative_runs(result: dict, label: str) -> list[tuple[dict, float, float]]:
    """An engine's timed runs in one case, each with its draft loop host time and step interval relative
    to the engine's mean in the case (so that cases and engines do not count); none for fewer than two."""
    runs = result["engines"].get(label, {}).get("runs", [])
    if len(runs) < 2:
        return []
    draft = statistics.fmean(r["draft_host_ms"] for r in runs)
    interval = statistics.fmean(r["step_interval_ms"] for r in runs)
    return [(r, r["draft_host_ms"] / draft, r["step_interval_ms"] / interval) for r in runs]


def host_speed_link(results: list[dict], labels: tuple = ("pristine", "pristine_b")) -> dict | None:
    """How closely a run's step interval follows its draft loop's host time (the same Python code in
    every engine: the host's speed in that run), over every timed run of ``labels`` in every case,
    each taken relative to its engine's mean in the case so that cases and engines do not count."""
    xs, ys = [], []
    for result in results:
        for label in labels:
            for _, draft, interval in relative_runs(result, label):
                xs.append(draft)
                ys.append(interval)
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return {
        "engines": list(labels),
        "runs": len(xs),
        "correlation": statistics.correlation(xs, ys),
        "draft_host_spread": [min(xs), max(xs)],
        "step_interval_spread": [min(ys), max(ys)],
        "step_interval_sd": statistics.pstdev(ys),
    }


def host_speed_draws(results: list[dict], labels: tuple = LABELS) -> dict | None:
    """Whether each run draws its own host speed. Two runs next to each other in time, of two different
    engines, would share a slow spell of the whole box: how closely their draft loop host times (and step
    intervals) follow each other, each relative to its engine's mean in its case. And a speed drawn once
    per run spreads a short run's step interval as widely as a long one's: the pristine processes' spread
    over all of a run's timed steps against over its first few only."""
    neighbours, spread = [], {}
    for result in results:
        in_case = []
        for label in labels:
            runs = relative_runs(result, label)
            in_case += [(run["t"], label, draft, interval) for run, draft, interval in runs]
            if label == "patched" or not runs:
                continue
            runs = [run for run, _, _ in runs]
            for k in ("all", *SHORT_RUNS):
                values = [r["step_interval_ms"] if k == "all" else r["step_interval_ms_first"][k] for r in runs]
                mean = statistics.fmean(values)
                spread.setdefault(str(k), []).extend(v / mean for v in values)
        in_case.sort()
        neighbours += [(a, b) for a, b in zip(in_case, in_case[1:], strict=False) if a[1] != b[1]]
    if len(neighbours) < 3:
        return None

    def follows(i: int) -> float | None:
        xs, ys = [a[i] for a, _ in neighbours], [b[i] for _, b in neighbours]
        return statistics.correlation(xs, ys) if len(set(xs)) > 1 and len(set(ys)) > 1 else None

    return {
        "neighbour_pairs": len(neighbours),
        "neighbour_start_gap_s": statistics.median(b[0] - a[0] for a, b in neighbours),
        "neighbour_draft_host_correlation": follows(2),
        "neighbour_step_interval_correlation": follows(3),
        "pristine_runs": len(spread.get("all", [])),
        "pristine_step_interval_sd": {k: statistics.pstdev(v) for k, v in spread.items() if len(v) > 1},
    }


def speed_by_vcpu(results: list[dict], labels: tuple = LABELS, shuffles: int = 2000) -> dict | None:
    """Whether the vCPU a run's scheduler thread ran on sets its host speed (``--pin-cpus`` deals the core
    groups round the engines, so runs land on many vCPUs): over the timed runs that ran on one vCPU, the
    share of their draft loop host time's variance (each relative to its engine's mean in its case) that
    lies between vCPUs, and how often the same runs dealt to the same vCPUs at random show as large a
    share (a permutation test: with few runs per vCPU the share is large by chance alone)."""
    runs = [
        (run["cpus"][0], draft)
        for result in results
        for label in labels
        for run, draft, _ in relative_runs(result, label)
        if len(run.get("cpus", [])) == 1
    ]
    vcpus = [vcpu for vcpu, _ in runs]
    if len(runs) < 4 or len(set(vcpus)) < 2:
        return None
    speeds = [draft for _, draft in runs]
    share = _between_share(vcpus, speeds)
    rng = random.Random(0)
    dealt = [_between_share(vcpus, rng.sample(speeds, len(speeds))) for _ in range(shuffles)]
    groups: dict[int, list[float]] = {}
    for vcpu, draft in runs:
        groups.setdefault(vcpu, []).append(draft)
    busiest = max(groups, key=lambda v: len(groups[v]))
    return {
        "runs": len(runs),
        "vcpus": len(groups),
        "between_share": share,
        "p_value": sum(d >= share for d in dealt) / shuffles,
        "busiest_vcpu": busiest,
        "busiest_spread": [min(groups[busiest]), max(groups[busiest])],
        "busiest_runs": len(groups[busiest]),
    }


def _between_share(keys: list, values: list[float]) -> float:
    """The share of the values' sum of squares that lies between the groups ``keys`` make (eta squared)."""
    mean = statistics.fmean(values)
    total = sum((v - mean) ** 2 for v in values)
    groups: dict = {}
    for key, value in zip(keys, values, strict=True):
        groups.setdefault(key, []).append(value)
    between = sum(len(g) * (statistics.fmean(g) - mean) ** 2 for g in groups.values())
    return between / total if total else 0.0


def draft_host_intervals(result: dict) -> dict[str, dict]:
    """Each other engine's draft loop host time against pristine's over the case's timed runs: the ratio of the
    run means with its 95% interval, the runs' spread and the runs a side for +-3% (bench/engine/precision.py).
    The same Python code in every engine, so the ratio of the second pristine process to the first is how far
    a process keeps a host speed of its own through the call; runs are the unit."""
    base = [r["draft_host_ms"] for r in result["engines"].get("pristine", {}).get("runs", [])]
    out = {}
    for label, engine in result["engines"].items():
        if label == "pristine":
            continue
        found = ratio_interval([r["draft_host_ms"] for r in engine["runs"]], base)
        if found:
            out[label] = found
    return out


def host_adjusted_floors(results: list[dict], labels: tuple = ("pristine", "pristine_b")) -> list[dict]:
    """How much of each case's two-process floor the runs' host speeds account for: the ratio of the two
    pristine processes' mean log step interval, raw and with each run moved to the case's mean host speed
    (its log step interval less ``slope`` x its log draft loop host time's distance from the case's mean).
    The slope is fitted on the other calls' cases, on the runs of the same engines (``labels``: the same code, whose
    step leans on the host as much; patched's leaned about half as much on the H100, 0.31-0.52 against 0.76-0.86),
    each around its own mean, so that no case's own runs set how far they are moved; a call alone has none."""
    out = []
    for result in results:
        others = [r for r in results if r.get("archive") != result.get("archive")]
        slope = _host_slope(others, labels)
        runs = {label: _logs(result, label) for label in labels}
        if slope is None or any(len(v) < 2 for v in runs.values()):
            continue
        mean_x = statistics.fmean(x for v in runs.values() for x, _ in v)
        raw = [statistics.fmean(y for _, y in v) for v in runs.values()]
        moved_runs = [[y - slope * (x - mean_x) for x, y in v] for v in runs.values()]
        moved = [statistics.fmean(v) for v in moved_runs]
        out.append(
            {
                "case": result["case"],
                "slope": slope,
                "raw": math.exp(raw[0] - raw[1]),
                "adjusted": math.exp(moved[0] - moved[1]),
                # the runs' own spread at one host speed; the slope's uncertainty is not in it
                "adjusted_interval": ratio_interval(*([math.exp(y) for y in v] for v in moved_runs)),
                "raw_interval": ratio_interval(*([math.exp(y) for _, y in v] for v in runs.values())),
            }
        )
    return out


def _logs(result: dict, label: str) -> list[tuple[float, float]]:
    runs = result["engines"].get(label, {}).get("runs", [])
    return [(math.log(r["draft_host_ms"]), math.log(r["step_interval_ms"])) for r in runs]


def _host_slope(results: list[dict], labels: tuple | None = None) -> float | None:
    """The least-squares slope of log step interval on log draft loop host time, the runs of every engine (or of
    those in ``labels``) in every case taken around their own means."""
    pairs = []
    for result in results:
        for label in labels or result["engines"]:
            runs = _logs(result, label)
            if len(runs) < 2:
                continue
            mean_x, mean_y = statistics.fmean(x for x, _ in runs), statistics.fmean(y for _, y in runs)
            pairs += [(x - mean_x, y - mean_y) for x, y in runs]
    spread = sum(x * x for x, _ in pairs)
    return sum(x * y for x, y in pairs) / spread if spread else None


def is_fast(run: dict, fast_below: float) -> bool:
    return run["draft_gpu_ms"] < fast_below


def by_mode(runs: list[dict], fast_below: float) -> dict[str, list[dict]]:
    modes: dict[str, list[dict]] = {"fast": [], "slow": []}
    for run in runs:
        modes["fast" if is_fast(run, fast_below) else "slow"].append(run)
    return modes


def timed_runs_per_case(runs: list[dict], reps: int) -> list[list[dict]]:
    """An engine's runs at one batch size, cut into its cases: ``reps`` timed runs, then the greedy one."""
    return [runs[i : i + reps] for i in range(0, len(runs), reps + 1)]


def study(
    archive: str, batch_size: int, skip: int, min_steps: int, fast_below: float, reps: int, gap_s: float = RUN_GAP_S
) -> list[dict]:
    """One result per case at ``batch_size`` in the archive, in the order the cases ran. Where the run's JSON
    lies beside the archive with each timed run's record, the runs are the driver's own (``source``: its
    windows, or its draft host time per run); else cut where the records pause, ``reps`` timed runs then
    a greedy one per case."""
    engines = read_steps(archive)
    beside = engine_json_beside(archive)
    timed_by_case = driver_runs(beside, batch_size) if beside else None
    if timed_by_case and all(r.get("window") for case in timed_by_case for runs in case.values() for r in runs):
        per_case = _runs_by_windows(engines, timed_by_case, batch_size, skip)
        source = f"the driver's windows, from {beside.name}"
    else:
        per_case = {
            label: timed_runs_per_case(run_summaries(engines[label], batch_size, skip, min_steps, gap_s), reps)
            for label in LABELS
            if label in engines
        }
        source = f"cut where the records pause, {reps} timed and one greedy per case"
        if timed_by_case:
            _check_cases(archive, per_case, timed_by_case)
            source += f", each checked against {beside.name}"
    return [
        {
            **case_result(
                f"{archive} (case {k + 1} at {batch_size} requests)",
                {label: cases[k] for label, cases in per_case.items() if k < len(cases)},
                fast_below,
            ),
            "archive": archive,
            "source": source,
        }
        for k in range(max((len(cases) for cases in per_case.values()), default=0))
    ]


def case_result(name: str, runs_of: dict[str, list[dict]], fast_below: float) -> dict:
    result: dict = {"case": name, "fast_below_ms": fast_below, "engines": {}}
    for label, runs in runs_of.items():
        modes = by_mode(runs, fast_below)
        result["engines"][label] = {
            "runs": runs,
            "draft_host_mean_ms": statistics.fmean(r["draft_host_ms"] for r in runs) if runs else None,
            "fast_runs": len(modes["fast"]),
            "slow_runs": len(modes["slow"]),
            "median_by_mode": {
                mode: {
                    what: statistics.median(r[what] for r in chosen)
                    for what in ("draft_gpu_ms", "step_gpu_ms", "step_interval_ms")
                }
                for mode, chosen in modes.items()
                if chosen
            },
        }
    result["within_mode_ratios"] = within_mode_ratios(result["engines"])
    result["in_time"] = modes_in_time(result["engines"], fast_below)
    return result


def modes_in_time(engines: dict, fast_below: float) -> dict:
    """Every engine's timed runs in the order they ran, and how often a run shares its mode with the
    run before it (whichever engine ran that), against how often it would if each run drew its mode
    on its own with the case's overall odds: a state of the box that lasts shows as the first above the
    second; a trait of one engine or its cores does not, since the engines take turns run by run."""
    runs = sorted(
        (run["t"], label, is_fast(run, fast_below)) for label, engine in engines.items() for run in engine["runs"]
    )
    pairs = list(zip(runs, runs[1:], strict=False))
    fast = sum(1 for _, _, is_fast in runs if is_fast) / len(runs) if runs else 0.0
    return {
        "order": " ".join(f"{label}:{'F' if is_fast else 'S'}" for _, label, is_fast in runs),
        "pairs": len(pairs),
        "same_mode": sum(1 for a, b in pairs if a[2] == b[2]) / len(pairs) if pairs else None,
        "same_mode_if_independent": fast**2 + (1 - fast) ** 2,
    }


def modes_by_cores(result: dict, cpus_runs: dict[str, list]) -> dict[str, dict[str, str]]:
    """Per engine, its timed runs' modes by the core group each ran on (named by its first CPU), and their
    draft loop host time relative to the engine's mean, from the run's JSON row (``cpus_runs``, one per timed
    run; engines without it are left out)."""
    out: dict[str, dict[str, str]] = {}
    for label, engine in result["engines"].items():
        cpus = cpus_runs.get(label)
        if not cpus or len(cpus) != len(engine["runs"]):
            continue
        mean = engine.get("draft_host_mean_ms") or statistics.fmean(r["draft_host_ms"] for r in engine["runs"])
        tally: dict[str, list] = {}
        for run, group in zip(engine["runs"], cpus, strict=True):
            counts = tally.setdefault(f"cpu{group[0]}" if group else "unpinned", [0, 0, 0.0])
            counts[0] += is_fast(run, result["fast_below_ms"])
            counts[1] += 1
            counts[2] += run["draft_host_ms"] / mean
        out[label] = {
            group: f"{fast} of {total} fast, draft host {host / total:.2f}x"
            for group, (fast, total, host) in sorted(tally.items())
        }
    return out


def within_mode_ratios(engines: dict) -> dict:
    """pristine over each other engine, per mode: what the other engine gains where both ran alike."""
    out: dict = {}
    base = engines.get("pristine", {}).get("median_by_mode", {})
    for label in ("pristine_b", "patched"):
        other = engines.get(label, {}).get("median_by_mode", {})
        for mode in ("fast", "slow"):
            if mode in base and mode in other:
                out.setdefault(label, {})[mode] = {
                    what: base[mode][what] / other[mode][what] for what in ("step_gpu_ms", "step_interval_ms")
                }
    return out


def cpus_runs_of(engine_json: str, batch_size: int) -> list[dict[str, list]]:
    """Per case at ``batch_size``, in order: engine label -> its ``cpus_runs`` (engine_ab's rows)."""
    with open(engine_json) as f:
        rows = json.load(f)["rows"]
    out = []
    for row in (row for row in rows if row["batch_size"] == batch_size):
        groups = {label: row[label]["cpus_runs"] for label in LABELS if "cpus_runs" in (row.get(label) or {})}
        if row.get("host_runs_pristine_b"):  # the second pristine process's cores are in its host records
            groups["pristine_b"] = [(run.get("host_cpus") or {}).get("cpus") for run in row["host_runs_pristine_b"]]
        out.append(groups)
    return out


def host_causes(engine_json: str, labels: tuple = LABELS) -> dict | None:
    """Which of three causes a slow run shows, from the rows' ``host_runs`` (engine_ab, since the fourth
    session): the hypervisor taking the vCPUs (``steal_share`` up), the scheduler thread waiting (its steps'
    on-CPU share below 1), or the same work taking more CPU time (neither). Over every run of ``labels``:
    the ranges of both shares (and of the canary vCPU's unit time, where every run has one), and how each
    follows the run's draft loop host time taken relative to its engine's mean in its case."""
    with open(engine_json) as f:
        rows = json.load(f)["rows"]
    rel, steal, on_cpu, canary, found = [], [], [], [], set()
    for row in rows:
        for label in labels:
            host_runs = (
                row.get("host_runs_pristine_b") if label == "pristine_b" else (row.get(label) or {}).get("host_runs")
            )
            runs = [r for r in host_runs or [] if r.get("draft_host_ms")]
            if len(runs) < 2:
                continue
            mean = statistics.fmean(r["draft_host_ms"] for r in runs)
            canaries = [((r.get("host_cpus") or {}).get("cpu_canary") or {}).get("median_ms") for r in runs]
            canary_mean = statistics.fmean(canaries) if all(canaries) else None
            for run, canary_ms in zip(runs, canaries, strict=True):
                if run.get("step_on_cpu_share") is None or not (run.get("host_cpus") or {}).get("ticks"):
                    continue
                found.add(label)
                if canary_mean:
                    canary.append(canary_ms / canary_mean)
                rel.append(run["draft_host_ms"] / mean)
                steal.append(run["host_cpus"]["steal_share"])
                on_cpu.append(run["step_on_cpu_share"])
    if len(rel) < 3:
        return None

    def follows(values: list[float]) -> float | None:
        return statistics.correlation(rel, values) if len(set(values)) > 1 and len(set(rel)) > 1 else None

    return {
        "runs": len(rel),
        "engines": [label for label in labels if label in found],
        "draft_host_spread": [min(rel), max(rel)],
        "steal_share": [min(steal), max(steal)],
        "on_cpu_share": [min(on_cpu), max(on_cpu)],
        "correlation_with_steal": follows(steal),
        "correlation_with_on_cpu": follows(on_cpu),
        # a vCPU no engine ran on, timing the same work (bench/cpu_canary.py), where every run has it
        "canary_spread": [min(canary), max(canary)] if len(canary) == len(rel) else None,
        "correlation_with_canary": follows(canary) if len(canary) == len(rel) else None,
    }


def _interval(interval: dict | None) -> str:
    if not interval:
        return ""
    low, high = interval["ci95"]
    return f" [{low:.3f}-{high:.3f}, {interval['runs'][0]} runs a side, {interval['runs_for_3pct']} for +-3%]"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_study(result: dict) -> None:
    print(
        f"{result['case']}: a run is fast below {result['fast_below_ms']} ms of draft GPU time; runs: {result['source']}"
    )
    for label, engine in result["engines"].items():
        draft = " ".join(f"{r['draft_gpu_ms']:.2f}" for r in engine["runs"])
        host = " ".join(f"{r['draft_host_ms']:.2f}" for r in engine["runs"])
        print(
            f"  {label:10s} {engine['fast_runs']:2d} fast, {engine['slow_runs']:2d} slow; draft GPU ms per run: {draft}"
            f" (host {host})"
        )
        on_cpu_runs = [r for r in engine["runs"] if "on_cpu_share" in r]
        if on_cpu_runs:
            print(
                f"  {'':10s} steps on a CPU: "
                + " ".join(f"{r['on_cpu_share']:.2f} (vCPU {','.join(map(str, r['cpus']))})" for r in on_cpu_runs)
            )
        for mode, medians in engine["median_by_mode"].items():
            print(
                f"  {'':10s} {mode}: draft {medians['draft_gpu_ms']:.2f}, step GPU {medians['step_gpu_ms']:.2f}, "
                f"step interval {medians['step_interval_ms']:.2f} ms"
            )
    slopes = {label: _host_slope([result], (label,)) for label in result["engines"]}
    if any(v is not None for v in slopes.values()):
        print(
            "  how far the step follows the host (the slope of log step interval on log draft host time, over the "
            "runs): " + ", ".join(f"{label} {round(v, 2) + 0.0:.2f}" for label, v in slopes.items() if v is not None)
        )
    means = {label: e["draft_host_mean_ms"] for label, e in result["engines"].items() if e.get("draft_host_mean_ms")}
    if "pristine" in means:
        print(
            "  draft loop host time, mean of the timed runs: "
            + ", ".join(
                f"{label} {ms:.3f} ms" + ("" if label == "pristine" else f" ({ms / means['pristine']:.3f}x pristine's)")
                for label, ms in means.items()
            )
        )
    intervals = draft_host_intervals(result)
    if intervals:
        print(
            "  draft loop host time against pristine's, the ratio of run means [95%] (runs' spread, sd over the mean,"
            " this engine's / pristine's): "
            + ", ".join(
                f"{label} {i['ratio']:.3f}x [{i['ci95'][0]:.3f}-{i['ci95'][1]:.3f}] ({i['run_cv'][0]:.3f} / "
                f"{i['run_cv'][1]:.3f}, {i['runs'][0]} runs a side)"
                for label, i in intervals.items()
            )
        )
    for label, modes in result["within_mode_ratios"].items():
        for mode, ratios in modes.items():
            print(
                f"  pristine / {label}, {mode} runs: step GPU {ratios['step_gpu_ms']:.3f}x, "
                f"step interval {ratios['step_interval_ms']:.3f}x"
            )
    in_time = result["in_time"]
    if in_time["pairs"]:
        print(
            f"  in time order, a run shares the mode of the run before it in {in_time['same_mode']:.2f} of "
            f"{in_time['pairs']} pairs ({in_time['same_mode_if_independent']:.2f} if each run drew its own): "
            f"{in_time['order']}"
        )
    for label, groups in result.get("by_cores", {}).items():
        print(f"  {label} by core group: " + ", ".join(f"{g} {t}" for g, t in groups.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="+", help="engine_logs*.tar.gz of engine_ab runs")
    ap.add_argument(
        "--batch-size", type=lambda v: [int(b) for b in v.split(",")], default=[32], help="one or more: 1,16,40"
    )
    ap.add_argument("--skip", type=int, default=2, help="steps left out at the start of each run (engine_ab's --skip)")
    ap.add_argument(
        "--min-steps",
        type=lambda v: [int(n) for n in v.split(",")],
        default=[15],
        help="timed steps below which a run is warm-up or profiling, not a timed run: one, or one per archive",
    )
    ap.add_argument(
        "--reps",
        type=lambda v: [int(n) for n in v.split(",")],
        required=True,
        help="timed runs per engine per case (the run's --reps, or the rounds a deadline left): one, or one per "
        "archive (not used where the run's JSON beside its archive has each run's window)",
    )
    ap.add_argument("--fast-below", type=float, default=2.0)
    ap.add_argument(
        "--run-gap-s",
        type=float,
        default=RUN_GAP_S,
        help="a pause this long starts a new run (the drafts grid's last timed run and greedy run are 0.2 s apart: 0.15)",
    )
    ap.add_argument("--link-engines", default="pristine,pristine_b", help="whose runs the host-speed correlation takes")
    ap.add_argument("--engine-json", help="the run's engine JSON (one archive): each run's core group")
    ap.add_argument("--host-runs", help="a run's engine JSON whose rows have host_runs: steal and on-CPU shares")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.engine_json and (len(args.archives) != 1 or len(args.batch_size) != 1):
        ap.error("--engine-json goes with one archive and one batch size")
    if len(args.reps) not in (1, len(args.archives)):
        ap.error(f"--reps: one count, or one per archive ({len(args.archives)})")
    reps = args.reps * len(args.archives) if len(args.reps) == 1 else args.reps
    if len(args.min_steps) not in (1, len(args.archives)):
        ap.error(f"--min-steps: one count, or one per archive ({len(args.archives)})")
    min_steps = args.min_steps * len(args.archives) if len(args.min_steps) == 1 else args.min_steps
    try:
        results = [
            result
            for archive, timed, least in zip(args.archives, reps, min_steps, strict=True)
            for batch_size in args.batch_size
            for result in study(archive, batch_size, args.skip, least, args.fast_below, timed, args.run_gap_s)
        ]
    except LookupError as error:
        print(f"host_modes: {error.args[0]}", file=sys.stderr)
        return 2
    if args.engine_json:
        for result, cpus_runs in zip(results, cpus_runs_of(args.engine_json, args.batch_size[0]), strict=False):
            result["by_cores"] = modes_by_cores(result, cpus_runs)
    for result in results:
        print_study(result)
    link = host_speed_link(results, tuple(args.link_engines.split(",")))
    if link:
        print(
            f"run by run, each relative to its engine's mean in its case, over {link['runs']} timed runs of "
            f"{' and '.join(link['engines'])}: the step interval follows the draft loop's host time with "
            f"correlation {link['correlation']:.2f} (draft host {link['draft_host_spread'][0]:.2f}-"
            f"{link['draft_host_spread'][1]:.2f}x, step interval {link['step_interval_spread'][0]:.2f}-"
            f"{link['step_interval_spread'][1]:.2f}x of the mean, its standard deviation "
            f"{link['step_interval_sd']:.3f})"
        )
    draws = host_speed_draws(results)
    if draws:
        sd = draws["pristine_step_interval_sd"]
        print(
            f"run after run, over {draws['neighbour_pairs']} pairs of runs of two engines next to each other in time "
            f"({draws['neighbour_start_gap_s']:.2f} s apart, start to start): the draft loop host time correlates "
            f"{_fmt(draws['neighbour_draft_host_correlation'])}, the step interval "
            f"{_fmt(draws['neighbour_step_interval_correlation'])}; a pristine run's step interval spreads by "
            + ", ".join(f"{sd[str(k)]:.3f} over its first {k} timed steps" for k in SHORT_RUNS if str(k) in sd)
            + f" and {sd.get('all', float('nan')):.3f} over all ({draws['pristine_runs']} runs, standard deviation of "
            "the mean in its case)"
        )
    floors = host_adjusted_floors(results)
    if floors:
        for floor in floors:
            print(
                f"{floor['case']}: two-process step interval {floor['raw']:.3f}x{_interval(floor['raw_interval'])}, "
                f"at one host speed {floor['adjusted']:.3f}x{_interval(floor['adjusted_interval'])} "
                f"(slope {floor['slope']:.2f}, fitted on the other calls)"
            )
        raw, moved = [f["raw"] for f in floors], [f["adjusted"] for f in floors]
        print(
            f"host-adjusted floors, over {len(floors)} cases: the two pristine processes' step interval ratio "
            f"{min(raw):.3f}-{max(raw):.3f}x raw ({sum(abs(r - 1) <= 0.03 for r in raw)} within 3%), "
            f"{min(moved):.3f}-{max(moved):.3f}x with each run moved to its case's mean host speed "
            f"({sum(abs(r - 1) <= 0.03 for r in moved)} within 3%)"
        )
    vcpu = speed_by_vcpu(results)
    if vcpu:
        print(
            f"by vCPU, over {vcpu['runs']} timed runs that each ran on one ({vcpu['vcpus']} vCPUs): the vCPU holds "
            f"{vcpu['between_share']:.2f} of the variance of the draft loop host time (relative to its engine's "
            f"mean); the same runs dealt to the same vCPUs at random hold as much in {vcpu['p_value']:.2f} of "
            f"shuffles; vCPU {vcpu['busiest_vcpu']}'s {vcpu['busiest_runs']} runs spread "
            f"{vcpu['busiest_spread'][0]:.2f}-{vcpu['busiest_spread'][1]:.2f}x"
        )
    causes = host_causes(args.host_runs) if args.host_runs else None
    if causes:
        corr = {k: _fmt(v) for k, v in causes.items() if k.startswith("correlation")}
        print(
            f"causes, over {causes['runs']} runs of {' and '.join(causes['engines'])} in {args.host_runs} "
            f"(draft host {causes['draft_host_spread'][0]:.2f}-{causes['draft_host_spread'][1]:.2f}x of its "
            f"engine's mean): steal share {causes['steal_share'][0]:.3f}-{causes['steal_share'][1]:.3f} "
            f"(correlation {corr['correlation_with_steal']}), "
            f"steps on a CPU {causes['on_cpu_share'][0]:.2f}-{causes['on_cpu_share'][1]:.2f} "
            f"(correlation {corr['correlation_with_on_cpu']})"
            + (
                f", the canary vCPU's unit {causes['canary_spread'][0]:.2f}-{causes['canary_spread'][1]:.2f}x of its "
                f"mean (correlation {corr['correlation_with_canary']})"
                if causes["canary_spread"]
                else ""
            )
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
