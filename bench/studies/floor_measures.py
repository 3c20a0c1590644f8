"""Every floor a user reads from one floor call's committed record, the run as the unit; where a run's time outside
its decode steps goes; and why the row's ``tokens_per_s_window`` gave 1.30 for two processes of one code (issue 47,
item 6). No GPU: it reads the call's JSON (its row's ``host_runs``: each run's window, ``prompt_s``,
``first_token_s``; its intervals) and the archive beside it (each engine's probe ``verify.jsonl``: the starts of the
verify forwards the row's step interval is made of), each run cut by its window as the driver cut it and checked
against the row's own ``step_interval_ms_runs``.

    python bench/studies/floor_measures.py docs/results/engine_h200_floor64k_same_layout.json

Each floor is the two pristine processes' ratio (pristine and pristine_b; in a call made with ``ci/run_engine_gpu.sh
--aa-only``, pristine and the engine labelled patched, which ran the pristine tree, and no A/B), as the row gives it:
a time's is the first process's over the second's, a rate's the second's over the first's, so that above 1 the first
is the slower either way; each A/B is pristine over patched for a time, patched over pristine for a rate. Intervals
are 95%: the ratio of run means (bench/engine/precision.py, runs independent), the rounds' paired log ratios (a t
interval; the two processes' runs of one round side by side), or a bootstrap that draws each process's runs again
with replacement (for pooled percentiles and rates). "Runs for +-3%" is the runs a side at which that interval's
half-width would be 3%, at the spread the call showed. bench/studies/floor_pool.py pools several calls' floors.
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

from bench.engine.precision import HALF_WIDTH, Z_975, ratio_interval, t_975  # noqa: E402
from bench.studies import host_modes  # noqa: E402

LABELS = ("pristine", "pristine_b", "patched")
TIME, RATE = "time", "rate"
ROW_MATCH = 0.05  # a run's step interval here and in the row: a neighbouring run's is 10-20% off


# ---- reading --------------------------------------------------------------------------------------------------


def archive_beside(engine_json: Path) -> Path:
    return engine_json.with_name(engine_json.name.removesuffix(".json") + "_engines.tar.gz")


def host_runs(row: dict, label: str) -> list[dict]:
    return row.get("host_runs_pristine_b") if label == "pristine_b" else row[label]["host_runs"]


def load(engine_json: Path, batch_size: int | None = None, skip: int | None = None) -> dict:
    """The call's row (the first, or the one at ``batch_size``) and each engine's timed runs: per run its window,
    ``prompt_s``, ``first_token_s`` and the starts of its verify forwards at the row's batch size."""
    doc = json.loads(engine_json.read_text())
    row = next((r for r in doc["rows"] if batch_size is None or r["batch_size"] == batch_size), None)
    if row is None:
        sizes = ", ".join(str(r["batch_size"]) for r in doc["rows"]) or "none"
        raise LookupError(f"{engine_json.name}: no row at batch size {batch_size} (rows at {sizes})")
    if row.get("patched_only"):
        raise LookupError(f"{engine_json.name}: a --patched-only call (no pristine engine ran)")
    skip = doc["meta"].get("skip_steps", 2) if skip is None else skip
    if not archive_beside(engine_json).exists():
        raise LookupError(f"{engine_json.name}: no {archive_beside(engine_json).name} beside it")
    verify = host_modes.read_probe_records(archive_beside(engine_json), "verify.jsonl")
    bs = row["batch_size"]
    runs = {}
    for label in (lab for lab in LABELS if lab != "pristine_b" or row.get("host_runs_pristine_b")):
        records = sorted(r["t"] for r in verify.get(label, []) if r["batch_size"] == bs)
        runs[label] = [
            {
                "t_start": h["window"][0],
                "t_end": h["window"][1],
                "prompt_s": h.get("prompt_s"),
                "first_token_s": h.get("first_token_s"),
                "starts": [t for t in records if h["window"][0] <= t <= h["window"][1]],
                "step_cpus": h.get("step_cpus") or [],
            }
            for h in host_runs(row, label)
        ]
    call = {"name": engine_json.name, "row": row, "runs": runs, "skip": skip, "meta": doc["meta"]}
    call["against_row"] = check_against_row(call)
    return call


def aa_pair(call: dict) -> tuple[str, str]:
    """The call's two pristine processes: pristine and pristine_b where the row has a second pristine's runs, else
    pristine and patched where the engine labelled patched ran the pristine tree (an --aa-only call); LookupError
    where the call has neither."""
    if "pristine_b" in call["runs"]:
        return "pristine", "pristine_b"
    if call["meta"].get("patched_is_pristine"):
        return "pristine", "patched"
    raise LookupError(f"{call['name']}: no two pristine processes (no host_runs_pristine_b, not patched_is_pristine)")


def step_interval_ms(run: dict, skip: int) -> float | None:
    """The run's median gap between verify forwards, the first ``skip`` left out (the row's own measure)."""
    gaps = step_gaps_ms(run, skip)
    return statistics.median(gaps) if gaps else None


def step_gaps_ms(run: dict, skip: int) -> list[float]:
    starts = run["starts"][skip:]
    return [(b - a) * 1000.0 for a, b in zip(starts, starts[1:], strict=False)]


def check_against_row(call: dict) -> dict[str, dict]:
    """Each run cut here has about the step interval the row gives it (``step_interval_ms_runs``, pristine and
    patched): LookupError where one is ROW_MATCH or more off, and every figure after it would read the wrong runs.
    Within it they may differ: the worker reads the probe's records as a run ends, and a run's last verify forward
    or two, written once their end event completed, can come after that read; the archive holds them. Per engine:
    how many runs differ, and by how much at most."""
    out = {}
    for label in ("pristine", "patched"):
        kept = call["row"][label].get("step_interval_ms_runs") or []
        found = [step_interval_ms(run, call["skip"]) for run in call["runs"][label]]
        if len(kept) != len(found):
            raise LookupError(f"{call['name']}: {len(found)} {label} runs cut here, {len(kept)} in the row")
        off = [abs(b / a - 1) for a, b in zip(kept, found, strict=True) if a and b]
        if len(off) != sum(1 for a in kept if a) or max(off, default=0.0) >= ROW_MATCH:
            raise LookupError(f"{call['name']}: {label}'s runs as cut here are not the row's step_interval_ms_runs")
        out[label] = {"runs": len(off), "differ": sum(d > 1e-9 for d in off), "most": max(off, default=0.0)}
    return out


# ---- each run's values ----------------------------------------------------------------------------------------


def tokens_per_run(call: dict) -> int:
    """Output tokens of every request of a run: the case's requests x its new tokens (the runs ignore EOS)."""
    return call["row"]["batch_size"] * call["row"]["new_tokens"]


def run_tokens_per_s(call: dict, run: dict) -> float:
    """The worker's ``tokens_per_s``: every output token over the run's wall time, its prefill included."""
    return tokens_per_run(call) / (run["t_end"] - run["t_start"])


def fixed_window_proxy_s(call: dict) -> float:
    """The shortest span from a run's first verify forward to its last, over every timed run of every engine."""
    return min(r["starts"][-1] - r["starts"][0] for runs in call["runs"].values() for r in runs if len(r["starts"]) > 1)


def steps_at(starts: list[float], t: float) -> float:
    """Gaps between verify forwards gone by ``t`` since the first forward, each counted as it goes (as the row's
    tokens_per_s_window now spreads each chunk's tokens over the gap before it): 0 up to the first start, k at
    the start of forward k (0-based), the number of gaps after the last."""
    k = sum(1 for s in starts if s <= t)
    if k == 0 or k == len(starts):
        return float(max(k - 1, 0))
    return k - 1 + (t - starts[k - 1]) / (starts[k] - starts[k - 1])


def steps_per_s_window(run: dict, window_s: float) -> float | None:
    """Verify forwards a second over ``window_s`` from the run's first: the fixed-window rate with the verify
    forwards' starts standing in for the streamed chunks, which the record does not keep (each forward gives every
    request its accepted tokens, so tokens/s is this times the batch's tokens a step)."""
    if len(run["starts"]) < 2:
        return None
    s0 = run["starts"][0]
    return (steps_at(run["starts"], s0 + window_s) - steps_at(run["starts"], s0)) / window_s


def per_run(call: dict) -> dict[str, dict[str, list]]:
    """Per engine, per measure: each run's value (None where the record has none)."""
    row, skip, window = call["row"], call["skip"], fixed_window_proxy_s(call)
    out = {}
    for label, runs in call["runs"].items():
        tpots = (row.get(label) or {}).get("tpot_ms_runs") if label != "pristine_b" else None
        out[label] = {
            "tpot": tpots or [None] * len(runs),
            "step interval": [step_interval_ms(r, skip) for r in runs],
            "tokens/s": [run_tokens_per_s(call, r) for r in runs],
            "steps/s over a fixed window (proxy)": [steps_per_s_window(r, window) for r in runs],
            "gaps": [step_gaps_ms(r, skip) for r in runs],
        }
    return out


# ---- intervals ------------------------------------------------------------------------------------------------


def oriented(first: list, second: list, kind: str) -> tuple[list, list]:
    """The two sides in the order whose ratio of means is the row's: a time's first over second, a rate's second
    over first."""
    return (first, second) if kind == TIME else (second, first)


def of_means(first: list, second: list, kind: str) -> dict | None:
    return means_interval(ratio_interval(*oriented(first, second, kind)))


def means_interval(found: dict | None) -> dict | None:
    """A ratio_interval as a measure: how it was made (its ``se_log`` weighs it against other calls' in
    bench/studies/floor_pool.py)."""
    return found and {**found, "how": "ratio of run means"}


def paired(first: list, second: list, kind: str) -> dict | None:
    """The geometric mean of the rounds' ratios with its t interval (rounds where both runs have a value)."""
    a, b = oriented(first, second, kind)
    d = [math.log(x / y) for x, y in zip(a, b, strict=True) if x and y]
    if len(d) < 3:
        return None
    mean, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))
    half = t_975(len(d) - 1) * se
    return {
        "ratio": math.exp(mean),
        "ci95": [math.exp(mean - half), math.exp(mean + half)],
        "runs": [len(d), len(d)],
        "runs_for_3pct": runs_for_3pct(len(d), half),
        "how": "paired by round",
        "se_log": se,
    }


def boot(first: list, second: list, stat, kind: str, boots: int, rng: random.Random, how: str) -> dict:
    """stat over each side's runs, their ratio (oriented as the row's), and the 95% percentile interval from
    drawing each side's runs again with replacement; the standard error of its log read from that interval as a
    normal one's."""

    def ratio(x, y):
        a, b = oriented(stat(x), stat(y), kind)
        return a / b

    found = ratio(first, second)
    draws = sorted(ratio(rng.choices(first, k=len(first)), rng.choices(second, k=len(second))) for _ in range(boots))
    low, high = draws[int(0.025 * boots)], draws[int(0.975 * boots) - 1]
    return {
        "ratio": found,
        "ci95": [low, high],
        "runs": [len(first), len(second)],
        "runs_for_3pct": runs_for_3pct(min(len(first), len(second)), math.log(high / low) / 2),
        "how": how,
        "se_log": math.log(high / low) / (2 * Z_975),
    }


def runs_for_3pct(runs: int, half_log: float) -> int:
    """Runs a side at which a half-width of ``half_log`` (on the log scale) at ``runs`` a side would be 3%."""
    return math.ceil(runs * (half_log / math.log1p(HALF_WIDTH)) ** 2)


def pooled_pct(p: int):
    def stat(runs: list[list[float]]) -> float:
        values = sorted(v for r in runs for v in r)
        return statistics.quantiles(values, n=100, method="inclusive")[p - 1]

    return stat


def pooled_rate(runs: list[list[float]]) -> float:
    """Verify forwards a second over every timed gap of the runs (tokens/s less the tokens a step)."""
    return sum(len(r) for r in runs) / sum(v for r in runs for v in r)


def measures(call: dict, first: str, second: str, boots: int, rng: random.Random) -> list[dict]:
    """Every measure a user reads, for ``first`` against ``second`` (the floor: pristine, pristine_b; the A/B:
    pristine, patched), each with the intervals its record allows."""
    values = per_run(call)
    return measures_of(values[first], values[second], boots, rng)


def measures_of(a: dict[str, list], b: dict[str, list], boots: int, rng: random.Random) -> list[dict]:
    """measures from each side's per-run values (per_run's, of one call or of several calls' runs together)."""
    out = []

    def add(name: str, *found):
        out.extend({"measure": name, **f} for f in found if f)

    add("TPOT", of_means(a["tpot"], b["tpot"], TIME), paired(a["tpot"], b["tpot"], TIME))
    add(
        "step interval (each run's median gap)",
        of_means(a["step interval"], b["step interval"], TIME),
        paired(a["step interval"], b["step interval"], TIME),
    )
    gaps = (a["gaps"], b["gaps"])
    for p in (10, 50, 90, 99):
        add(f"step gaps' p{p}, pooled", boot(*gaps, pooled_pct(p), TIME, boots, rng, "bootstrap over runs"))
    add("tokens/s over the run's wall time", of_means(a["tokens/s"], b["tokens/s"], RATE))
    add("tokens/s over the run's wall time", paired(a["tokens/s"], b["tokens/s"], RATE))
    add(
        "tokens/s over the run's wall time, median of runs (the row's)",
        boot(a["tokens/s"], b["tokens/s"], statistics.median, RATE, boots, rng, "bootstrap over runs"),
    )
    add("tokens/s over the timed steps, pooled", boot(*gaps, pooled_rate, RATE, boots, rng, "bootstrap over runs"))
    proxy = "steps/s over a fixed window (proxy)"
    add(proxy, of_means(a[proxy], b[proxy], RATE), paired(a[proxy], b[proxy], RATE))
    return out


# ---- the window, the fixed time, the vCPUs --------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    values = sorted(v for v in values if v is not None)
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
    return {"median": statistics.median(values), "p10": deciles[0], "p90": deciles[-1], "n": len(values)}


def old_window(call: dict) -> dict[str, dict]:
    """Per engine, what the row's ``tokens_per_s_window`` (made before 6 Dec 2026) counted: its window began at the
    run's earliest first token, ``first_token_s`` after the run's start, and the batch's first verify forward came
    after it; the verify forwards begun inside the window, per run; and the tokens the row's median run counted."""
    row, window = call["row"], call["row"]["window_s"]
    out = {}
    for label, runs in call["runs"].items():
        firsts = [r["t_start"] + r["first_token_s"] for r in runs]
        lead = [r["starts"][0] - f for r, f in zip(runs, firsts, strict=True) if r["starts"]]
        inside = [sum(f <= s <= f + window for s in r["starts"]) for r, f in zip(runs, firsts, strict=True)]
        rate = (row.get(label) or {}).get("tokens_per_s_window")
        if label == "pristine_b":
            aa = (row.get("aa_noise_processes") or {}).get("tokens_per_s_window")
            rate = aa * row["pristine"]["tokens_per_s_window"] if aa else None
        out[label] = {
            "first_token_to_first_verify_s": spread(lead),
            "verify_in_window": spread(inside),
            "verify_in_window_at_most_2": sum(n <= 2 for n in inside) / len(inside),
            "tokens_counted": rate * window if rate else None,
        }
    return out


def fixed_time(call: dict) -> dict[str, dict]:
    """Per engine, a run's time outside its decode steps, piece by piece (s): its prompts' ids, from its start to
    its first token, from there to its first verify forward, its decode (first to last verify forward), from its
    last verify forward to its end, and from its end to the next run's start (any engine: the driver's turn)."""
    every = sorted((r["t_start"], r["t_end"]) for runs in call["runs"].values() for r in runs)
    out = {}
    for label, runs in call["runs"].items():
        pieces: dict[str, list] = {k: [] for k in ("prompt", "to first token", "to first verify", "decode")}
        pieces.update({"after last verify": [], "to next run": [], "run": []})
        for r in runs:
            if not r["starts"]:
                continue
            first = r["t_start"] + r["first_token_s"]
            pieces["prompt"].append(r["prompt_s"])
            pieces["to first token"].append(r["first_token_s"])
            pieces["to first verify"].append(r["starts"][0] - first)
            pieces["decode"].append(r["starts"][-1] - r["starts"][0])
            pieces["after last verify"].append(r["t_end"] - r["starts"][-1])
            pieces["run"].append(r["t_end"] - r["t_start"])
            later = [s for s, _ in every if s > r["t_start"]]
            if later:
                pieces["to next run"].append(later[0] - r["t_end"])
        out[label] = {k: spread(v) for k, v in pieces.items()}
    return out


def round_s(call: dict) -> float:
    """Wall time a round of every engine took, start to start, over the call."""
    starts = [r["t_start"] for r in call["runs"]["pristine"]]
    return (starts[-1] - starts[0]) / (len(starts) - 1)


def vcpus(call: dict) -> dict[str, dict]:
    """Per engine: the share of runs whose decode steps all ended on one vCPU, and the vCPUs, with their runs."""
    out = {}
    for label, runs in call["runs"].items():
        one = [r["step_cpus"][0] for r in runs if len(r["step_cpus"]) == 1]
        counts: dict[int, int] = {}
        for v in one:
            counts[v] = counts.get(v, 0) + 1
        out[label] = {"one_vcpu": len(one) / len(runs), "runs_by_vcpu": dict(sorted(counts.items()))}
    return out


# ---- output ---------------------------------------------------------------------------------------------------


def _s(d: dict, digits: int = 3) -> str:
    return f"{d['median']:.{digits}f} ({d['p10']:.{digits}f}-{d['p90']:.{digits}f})"


def half_width(m: dict) -> float:
    """An interval's half-width, as a fraction of its ratio (on the log scale, where it is symmetric)."""
    low, high = m["ci95"]
    return math.sqrt(high / low) - 1


def within_3pct(m: dict) -> str:
    """Whether a floor's interval lies within 3% of 1, in words."""
    low, high = m["ci95"]
    return "within +-3%" if low >= 1 - HALF_WIDTH and high <= 1 + HALF_WIDTH else "not within +-3%"


def interval_text(m: dict, floor: bool = True) -> str:
    """The ratio, its interval, how it was made, and its half-width; for a floor whether it lies within 3% of 1."""
    low, high = m["ci95"]
    return (
        f"{m['ratio']:.3f} [{low:.3f}-{high:.3f}] ({m['how']}, {m['runs'][0]} runs a side; +-{100 * half_width(m):.1f}%, "
        f"{m['runs_for_3pct']} runs for +-3%" + (f"; {within_3pct(m)})" if floor else ")")
    )


def print_floor(call: dict, pair: tuple[str, str], boots: int, seed: int, named: bool = False) -> list[dict]:
    """The call's floor, its second pristine process against its first (aa_pair), a line a measure; ``named``:
    the call's name in its heading. Returns the measures printed (the row's own TPOT interval not among them)."""
    name = f"{call['name']}, " if named else ""
    print(f"\n== {name}floor: {pair[1]} against {pair[0]} (95% intervals, the run as the unit) ==")
    own = call["row"].get("aa_noise_processes") if pair[1] == "pristine_b" else None
    if own and own.get("tpot_mean_of_runs_interval"):
        kept = {**own["tpot_mean_of_runs_interval"], "how": "the row's own, ratio of run means"}
        print(f"  TPOT: {interval_text(kept)}")
    found = measures(call, *pair, boots, random.Random(seed))
    for m in found:
        print(f"  {m['measure']}: {interval_text(m)}")
    return found


def print_window(row: dict) -> None:
    """The row's tokens_per_s_window as made since 6 Dec 2026 (rows.fixed_window_s)."""
    found = row.get("speedup_tokens_per_s_window_mean_of_runs_interval")
    ratio = "-" if not found else f"{found['ratio']:.3f} [{found['ci95'][0]:.3f}-{found['ci95'][1]:.3f}]"
    if row["window_s"] is None:
        print("\nthe row's tokens_per_s_window: no window (no run had every request decoding at once)")
        return
    print(
        f"\nthe row's tokens_per_s_window: a window of {row['window_s']:.3f} s from when every request of a run "
        f"decodes ({row['window_from']}); runs shorter, left out: {row.get('window_short_runs', '-')}; "
        f"patched over pristine, the ratio of run means [95%]: {ratio}"
    )


def print_old_window(call: dict) -> None:
    """What the row's tokens_per_s_window counted, for rows made before 6 Dec 2026 (old_window)."""
    row = call["row"]
    print(
        "\nthe row's tokens_per_s_window (made before 6 Dec 2026): a window of "
        f"{row['window_s']:.3f} s from each run's earliest first token; the median over runs; its floor "
        f"{(row.get('aa_noise_processes') or {}).get('tokens_per_s_window', float('nan')):.3f}, its A/B "
        f"{row.get('speedup_tokens_per_s_window') or float('nan'):.3f}. Median (p10-p90) over each engine's runs:"
    )
    for label, w in old_window(call).items():
        first = w["first_token_to_first_verify_s"]
        inside = w["verify_in_window"]
        tokens = "-" if w["tokens_counted"] is None else f"{w['tokens_counted']:.0f}"
        print(
            f"  {label:10s} first token to the batch's first verify forward {_s(first)} s; verify forwards begun "
            f"inside the window {inside['median']:.0f} ({inside['p10']:.0f}-{inside['p90']:.0f}), 2 or fewer in "
            f"{w['verify_in_window_at_most_2']:.2f} of runs; tokens the median counted {tokens}"
        )


def report(call: dict, pair: tuple[str, str], boots: int, seed: int, setup_s: float | None) -> None:
    """All of the above for one call, its floor ``pair`` (aa_pair); its A/B where its patched engine is not the
    floor's second pristine process."""
    row = call["row"]
    n = len(call["runs"]["pristine"])
    print(f"== {call['name']}: {row['batch_size']} x {row['ctx']}, next_n {row['next_n']}, {n} timed runs an engine ==")
    print(
        "each run cut by its window from the archive's verify records; against the row's step_interval_ms_runs: "
        + ", ".join(
            f"{label} {c['differ']} of {c['runs']} runs differ, by at most {100 * c['most']:.1f}%"
            for label, c in call["against_row"].items()
        )
        + " (the archive holds verify records written after the worker read the file at a run's end)"
    )
    if row.get("window_from"):
        print_window(row)
    else:
        print_old_window(call)
    engines = ("two", "three")[len(call["runs"]) - 2]
    print(
        f"\nwhere a run's time goes (s), median (p10-p90) over each engine's runs; a round of the {engines} engines "
        f"took {round_s(call):.3f} s start to start:"
    )
    for label, pieces in fixed_time(call).items():
        print(f"  {label:10s} " + ", ".join(f"{k} {_s(v)}" for k, v in pieces.items()))
    print("\nthe vCPU each run's decode steps ended on (the rows' step_cpus):")
    for label, v in vcpus(call).items():
        by = ", ".join(f"{cpu}: {k}" for cpu, k in v["runs_by_vcpu"].items())
        print(f"  {label:10s} all on one vCPU in {v['one_vcpu']:.2f} of runs; runs by vCPU {by}")
    print(
        f"\nthe fixed-window proxy's window: {fixed_window_proxy_s(call):.3f} s from each run's first verify forward "
        "(the shortest first-to-last span of any run); the record keeps no streamed chunk times, so the row's "
        "tokens_per_s_window as now defined cannot be made again from it"
    )
    print_floor(call, pair, boots, seed)
    if pair[1] != "patched":
        print("\n== A/B: patched (95% intervals, the run as the unit) ==")
        for m in measures(call, "pristine", "patched", boots, random.Random(seed)):
            print(f"  {m['measure']}: {interval_text(m, floor=False)}")
    if setup_s:
        print(
            f"\nthe runs a call holds: {n} rounds in {round_s(call) * n:.0f} s of runs at {round_s(call):.3f} s a "
            f"round, after {setup_s:.0f} s of engine starts and pool prefill (the call's log); each 100 rounds more "
            f"is {100 * round_s(call):.0f} s"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine_json", type=Path, help="a floor call's JSON, its _engines.tar.gz beside it")
    ap.add_argument("--batch-size", type=int, help="the row's (default: the first row)")
    ap.add_argument("--boots", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--setup-s", type=float, help="the call's engine starts and pool prefill (s), from its log")
    args = ap.parse_args(argv)
    try:
        call = load(args.engine_json, args.batch_size)
        pair = aa_pair(call)
    except LookupError as error:
        print(f"floor_measures: {error.args[0]}", file=sys.stderr)
        return 2
    report(call, pair, args.boots, args.seed, args.setup_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
