"""How tightly an engine run pins a ratio of two engines' mean TPOT.

On the H200 box the host's speed is drawn afresh for each timed run: two runs of two engines next to each
other in time do not share it, and a run of 4 timed steps spreads as widely as one of 30
(docs/engine-benchmark.md, "Host speed run by run"). So an engine's runs are independent draws, and the
ratio of two engines' means has a standard error that falls as one over the square root of the runs,
whatever their length. Each row gives that interval beside its ratio and its floor, and how many runs per
engine would bring the interval's half-width to 3% at the spread its runs showed.
"""

from __future__ import annotations

import math
import statistics

# Student's t at 97.5% (a two-sided 95% interval) by degrees of freedom; between entries the smaller
# freedom's value (the wider interval) is taken, beyond the last the normal's 1.96.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
T_975.update({10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980})
Z_975 = 1.96
HALF_WIDTH = 0.03  # the floor issue 47 asks: within 3%


def t_975(df: float) -> float:
    below = [k for k in T_975 if k <= df]
    return Z_975 if df > max(T_975) else T_975[max(below, default=1)]


def ratio_interval(first: list[float | None], second: list[float | None]) -> dict | None:
    """mean(first) / mean(second) with its 95% interval (the delta method on the log of the ratio, Welch's
    degrees of freedom), the runs and their spread (standard deviation over the mean) per side, and the runs
    per side that would make the interval +-3% at that spread. None with fewer than two runs a side."""
    a, b = [v for v in first if v], [v for v in second if v]
    if len(a) < 2 or len(b) < 2:
        return None
    return ratio_interval_of_moments(moments(a), moments(b))


def moments(values: list[float]) -> tuple[int, float, float]:
    """The runs, their mean and their standard deviation: all ratio_interval reads of a side."""
    return len(values), statistics.fmean(values), statistics.stdev(values)


def ratio_interval_of_moments(first: tuple[int, float, float], second: tuple[int, float, float]) -> dict:
    """ratio_interval from each side's moments, for a side whose runs are kept only as their mean and spread
    (a second pristine process's TPOT in a row) or for runs of several calls taken together."""
    (n_a, mean_a, sd_a), (n_b, mean_b, sd_b) = first, second
    cv_a, cv_b = sd_a / mean_a, sd_b / mean_b
    var_a, var_b = cv_a**2 / n_a, cv_b**2 / n_b  # of the log of each mean
    se = math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1)) if se else math.inf
    ratio = mean_a / mean_b
    spread = math.sqrt((cv_a**2 + cv_b**2) / 2)
    return {
        "ratio": ratio,
        "ci95": [ratio * math.exp(-t_975(df) * se), ratio * math.exp(t_975(df) * se)],
        "runs": [n_a, n_b],
        "run_cv": [cv_a, cv_b],
        "runs_for_3pct": math.ceil(2 * (Z_975 * spread / math.log1p(HALF_WIDTH)) ** 2),
        "se_log": se,  # the standard error of the ratio's log, which weighs it against other calls' (floor_pool)
    }
