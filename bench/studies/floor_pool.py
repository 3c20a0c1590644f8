"""The floor of several floor calls of one setup taken together (issue 47, item 6 asks for a floor within +-3% at
32 x 64k; one call holds about 100-230 runs a side, and TPOT's +-3% needs about 279). No GPU: each call is read as
bench/studies/floor_measures.py reads it, with its two pristine processes (floor_measures.aa_pair): pristine and
pristine_b, or, in a call made with ``ci/run_engine_gpu.sh --aa-only``, pristine and the engine labelled patched,
which ran the pristine tree. Calls whose rows differ in what makes a measure are refused.

    python bench/studies/floor_pool.py A.json B.json C.json

It prints each call's floor as floor_measures does, then the pooled floor of each measure: the same ratio made from
every call's runs together, as if they were one call's (runs independent), its 95% interval and the runs a side for
+-3%, oriented as floor_measures' (a time's first over second, a rate's second over first). A three-engine call's
row keeps pristine_b's TPOT not run by run but as its interval against pristine (ratio, spread, runs), so TPOT's
ratio of run means is pooled from each side's runs, mean and standard deviation (precision.ratio_interval_of_moments),
and TPOT paired by round only where every call keeps both sides' runs.

Pooling the runs holds where the calls share one floor. On the H100 the two processes' offset moved by 7-11% from
call to call, so for each measure it also prints each call's log floor and its standard error, Cochran's Q over them
with its p-value (chi-square, calls - 1 degrees of freedom), and DerSimonian and Laird's random-effects pool (the
spread between calls estimated from Q and added to each call's variance; a normal interval). It names the interval
to read: the pooled one where Q's p-value is 0.1 or more, else the random-effects one. With few calls Q finds only
a large spread between them, and the random-effects interval, which takes that spread as known, is narrower than it
should be; neither says the floor holds for a call not yet made.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.engine.precision import Z_975, moments, ratio_interval_of_moments  # noqa: E402
from bench.studies import floor_measures  # noqa: E402

MATCH = ("batch_size", "ctx", "next_n", "new_tokens", "kv_cache_dtype", "simulated_acceptance", "lengths")
READ_POOLED_P = (
    0.1  # Q's p-value at or above which the pooled interval is the one to read (the usual level for Q, not fitted)
)


# ---- the calls ------------------------------------------------------------------------------------------------


def setup(call: dict) -> dict:
    """What makes a call's measures: its row's case, the steps each run leaves out, the card, and whether the two
    processes shared one hash seed and address layout (``--same-layout``; with random layouts the H100's processes
    differed by 7-11% in two calls of three)."""
    meta = call["meta"]
    return {
        **{field: call["row"].get(field) for field in MATCH},
        "skip_steps": call["skip"],
        "gpu": (meta.get("versions") or {}).get("gpu"),
        "same_layout": bool(meta.get("same_layout")),
    }


def check_same(calls: list[dict]) -> None:
    """ValueError naming the first field in which a call's setup is not the first call's."""
    first = setup(calls[0])
    for call in calls[1:]:
        for field, value in setup(call).items():
            if value != first[field]:
                raise ValueError(
                    f"{call['name']}'s {field} is {value!r}, {calls[0]['name']}'s {first[field]!r}: "
                    "the calls pooled must share their setup"
                )


# ---- TPOT, where a side keeps no runs -------------------------------------------------------------------------


def tpot_moments(call: dict, label: str) -> tuple[int, float, float] | None:
    """A side's TPOT runs, mean and standard deviation: from its runs where the row keeps them, else (pristine_b)
    from the row's interval of pristine against it: its mean pristine's over the ratio, its spread the interval's."""
    runs = [v for v in ((call["row"].get(label) or {}).get("tpot_ms_runs") or []) if v]
    if len(runs) >= 2:
        return moments(runs)
    own = (call["row"].get("aa_noise_processes") or {}).get("tpot_mean_of_runs_interval")
    base = tpot_moments(call, "pristine") if label != "pristine" else None
    if not own or not base:
        return None
    mean = base[1] / own["ratio"]
    return own["runs"][1], mean, own["run_cv"][1] * mean


def joined_moments(parts: list[tuple[int, float, float]]) -> tuple[int, float, float]:
    """The runs, mean and standard deviation of several sets of runs taken as one."""
    n = sum(k for k, _, _ in parts)
    mean = sum(k * m for k, m, _ in parts) / n
    squares = sum((k - 1) * sd**2 + k * (m - mean) ** 2 for k, m, sd in parts)
    return n, mean, math.sqrt(squares / (n - 1))


def tpot_of_means(calls: list[dict], pairs: list[tuple[str, str]]) -> dict | None:
    """TPOT's ratio of run means over the calls' runs together, made from each side's moments."""
    sides = [[tpot_moments(call, pair[i]) for call, pair in zip(calls, pairs, strict=True)] for i in (0, 1)]
    if any(None in side for side in sides):
        return None
    found = ratio_interval_of_moments(*(joined_moments(side) for side in sides))
    return {"measure": "TPOT", **floor_measures.means_interval(found)}


def with_tpot(found: list[dict], calls: list[dict], pairs: list[tuple[str, str]]) -> list[dict]:
    """``found`` with TPOT's ratio of run means first where it has none (a side whose runs the row does not keep)."""
    if any(m["measure"] == "TPOT" and m["how"] == "ratio of run means" for m in found):
        return found
    tpot = tpot_of_means(calls, pairs)
    return ([tpot] if tpot else []) + found


# ---- the floors -----------------------------------------------------------------------------------------------


def joined_runs(calls: list[dict], pairs: list[tuple[str, str]]) -> tuple[dict, dict]:
    """Each side's per-run values of every measure (floor_measures.per_run), every call's runs in turn; TPOT's
    left empty unless every call keeps both sides' runs (tpot_of_means pools it then)."""
    a: dict[str, list] = {}
    b: dict[str, list] = {}
    for call, pair in zip(calls, pairs, strict=True):
        values = floor_measures.per_run(call)
        for side, label in zip((a, b), pair, strict=True):
            for name, runs in values[label].items():
                side.setdefault(name, []).extend(runs)
    if any(second == "pristine_b" for _, second in pairs):
        a["tpot"] = b["tpot"] = []
    return a, b


def pooled_floor(calls: list[dict], pairs: list[tuple[str, str]], boots: int, seed: int) -> list[dict]:
    """The floor of every call's runs together, each measure as floor_measures makes one call's (of one call, that
    call's floor), TPOT's ratio of run means included."""
    a, b = joined_runs(calls, pairs)
    return with_tpot(floor_measures.measures_of(a, b, boots, random.Random(seed)), calls, pairs)


# ---- between the calls ----------------------------------------------------------------------------------------


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square with ``df`` degrees of freedom >= x), from the closed forms of the upper incomplete gamma
    function at whole and half-whole shapes."""
    if x <= 0:
        return 1.0
    h = x / 2
    if df % 2 == 0:
        term = total = 1.0
        for j in range(1, df // 2):
            term *= h / j
            total += term
        return math.exp(-h) * total
    total, term = math.erfc(math.sqrt(h)), math.sqrt(h) * math.exp(-h) / math.gamma(1.5)
    for j in range(1, (df - 1) // 2 + 1):
        total += term
        term *= h / (j + 0.5)
    return total


def heterogeneity(per_call: list[dict]) -> dict | None:
    """Over the calls' floors of one measure: each log floor weighed by one over its variance, Cochran's Q about
    their weighted mean and its p-value, and DerSimonian and Laird's random-effects pool (tau^2, the variance
    between calls, from Q; each call weighed by one over its variance plus tau^2; a normal 95% interval). None with
    fewer than two calls or a call without a standard error."""
    logs, ses = [math.log(m["ratio"]) for m in per_call], [m.get("se_log") for m in per_call]
    if len(logs) < 2 or not all(ses):
        return None
    w = [1 / se**2 for se in ses]
    fixed = sum(wi * y for wi, y in zip(w, logs, strict=True)) / sum(w)
    q, df = sum(wi * (y - fixed) ** 2 for wi, y in zip(w, logs, strict=True)), len(logs) - 1
    tau2 = max(0.0, (q - df) / (sum(w) - sum(wi**2 for wi in w) / sum(w)))
    w_random = [1 / (se**2 + tau2) for se in ses]
    mean = sum(wi * y for wi, y in zip(w_random, logs, strict=True)) / sum(w_random)
    half = Z_975 / math.sqrt(sum(w_random))
    return {
        "logs": logs,
        "ses": ses,
        "q": q,
        "df": df,
        "p": chi2_sf(q, df),
        "tau": math.sqrt(tau2),
        "random": {"ratio": math.exp(mean), "ci95": [math.exp(mean - half), math.exp(mean + half)]},
    }


def to_read(pooled: dict, found: dict) -> tuple[str, dict]:
    """The interval to read: the pooled one where Q shows no heterogeneity, else the random-effects one."""
    return ("pooled", pooled) if found["p"] >= READ_POOLED_P else ("random effects", found["random"])


# ---- output ---------------------------------------------------------------------------------------------------


def _short(m: dict) -> str:
    low, high = m["ci95"]
    return (
        f"{m['ratio']:.3f} [{low:.3f}-{high:.3f}] (+-{100 * floor_measures.half_width(m):.1f}%; "
        f"{floor_measures.within_3pct(m)})"
    )


def report(calls: list[dict], pairs: list[tuple[str, str]], boots: int, seed: int) -> None:
    case = ", ".join(f"{k} {v}" for k, v in setup(calls[0]).items())
    print(f"== {len(calls)} floor calls of one setup ({case}): " + ", ".join(c["name"] for c in calls) + " ==")
    per_call = []
    for call, pair in zip(calls, pairs, strict=True):
        found = with_tpot(floor_measures.print_floor(call, pair, boots, seed, named=True), [call], [pair])
        per_call.append({(m["measure"], m["how"]): m for m in found})
    pooled = pooled_floor(calls, pairs, boots, seed)
    print(f"\n== pooled: the {len(calls)} calls' runs together (95% intervals, the run as the unit) ==")
    for m in pooled:
        print(f"  {m['measure']}: {floor_measures.interval_text(m)}")
    print(
        "\n== between the calls: each call's log floor (its standard error), in the order above; Cochran's Q; "
        "DerSimonian-Laird's random-effects pool; the interval to read: the pooled one where Q's p-value is "
        f"{READ_POOLED_P} or more, else the random-effects one =="
    )
    for m in pooled:
        key = (m["measure"], m["how"])
        found = heterogeneity([one[key] for one in per_call]) if all(key in one for one in per_call) else None
        if found is None:
            print(f"  {m['measure']}, {m['how']}: not in every call")
            continue
        each = ", ".join(f"{y:+.4f} ({se:.4f})" for y, se in zip(found["logs"], found["ses"], strict=True))
        which, read = to_read(m, found)
        print(
            f"  {m['measure']}, {m['how']}: {each}; Q {found['q']:.2f} on {found['df']} df, p {found['p']:.3f}; "
            f"random effects {_short(found['random'])}, tau {found['tau']:.4f}; read the {which} interval: "
            f"{_short(read)}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine_jsons", type=Path, nargs="+", help="floor calls' JSONs, each's _engines.tar.gz beside it")
    ap.add_argument("--batch-size", type=int, help="the rows' (default: each call's first row)")
    ap.add_argument("--boots", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        if len({p.resolve() for p in args.engine_jsons}) < max(2, len(args.engine_jsons)):
            raise ValueError("two calls or more, each once")
        calls = [floor_measures.load(path, args.batch_size) for path in args.engine_jsons]
        pairs = [floor_measures.aa_pair(call) for call in calls]
        check_same(calls)
    except (LookupError, ValueError) as error:
        print(f"floor_pool: {error.args[0]}", file=sys.stderr)
        return 2
    report(calls, pairs, args.boots, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
