"""The indexer step's grids: cases of next_n x requests x context x uniform/ragged lengths, the lengths
and seed of each case, and the time a grid's timed replays take on an H200."""

from __future__ import annotations

import itertools
import random

GRIDS = {
    "full": dict(
        next_ns=(2, 3, 4),
        batch_sizes=(1, 4, 8, 32, 64, 128),
        ctxs=(4096, 16384, 65536),
        lengths=("uniform", "ragged"),
    ),
    "smoke": dict(next_ns=(2, 3, 4), batch_sizes=(1, 8, 32), ctxs=(4096, 65536), lengths=("uniform", "ragged")),
    "tiny": dict(next_ns=(2, 4), batch_sizes=(1, 8), ctxs=(4096,), lengths=("ragged",)),
    # the large cases alone (next_n 2/3/4 at 32 and 128 requests, 16k and 64k): a short GPU call
    "large": dict(next_ns=(2, 3, 4), batch_sizes=(32, 128), ctxs=(16384, 65536), lengths=("uniform", "ragged")),
    # issue 22's hold-out grid for the SM90 row-width rule: measured after the rule was fixed, never
    # used to set it (its batch sizes and contexts are none of the committed grids')
    "holdout": dict(
        next_ns=(2, 3, 4, 5, 6),
        batch_sizes=(2, 6, 12, 16, 24, 48, 96),
        ctxs=(2048, 8192, 32768, 131072),
        lengths=("uniform", "ragged"),
    ),
    # issue 23's cases: next_n 3 and 5 (one token per row in this series) where servers run them, and 6
    # (three pairs)
    "odd": dict(next_ns=(3, 5, 6), batch_sizes=(32, 64, 128), ctxs=(16384, 65536), lengths=("uniform", "ragged")),
    # cases a pristine tree runs too, for top-k identity across trees (a subset of "holdout")
    "identity": dict(next_ns=(2, 3, 4, 5, 6), batch_sizes=(16, 48), ctxs=(8192,), lengths=("ragged",)),
    # The engine's 64k cases (its targets64k grid, 32 requests, and 128 beside them) at next_n 3-6, to
    # run with --pages random and contiguous: at next_n 5, 32 x 64k uniform, the engine's one token per
    # row took 211 us a layer where the kernel grid (random pages) took 347. Uniform lengths are the
    # engine's; ragged here are the step's own (uniform in [ctx/16, ctx], one request short), not the
    # engine's [ctx/2, ctx]. The fixture, 128 x 65536 tokens, is a one-layer pool of about 6.6 GB
    # (656 B of fp8 MLA cache and 132 B of index-K per token), half the hold-out grids' 128 x 131072.
    "engine64k": dict(next_ns=(3, 4, 5, 6), batch_sizes=(32, 128), ctxs=(65536,), lengths=("uniform", "ragged")),
}
MODES = {"both": (False, True), "eager": (False,), "graph": (True,)}


def known_grids(spec: str) -> list[str]:
    names = spec.split(",")
    unknown = [n for n in names if n not in GRIDS]
    if unknown:
        raise SystemExit(f"unknown grid(s) {unknown}; the grids are {sorted(GRIDS)}")
    return names


def grid_cases(names):
    """(next_n, bs, ctx, lengths kind) -> the grids it belongs to, in the grids' order, each case once."""
    cases: dict[tuple, list[str]] = {}
    for name in names:
        g = GRIDS[name]
        for case in itertools.product(g["next_ns"], g["batch_sizes"], g["ctxs"], g["lengths"]):
            cases.setdefault(case, []).append(name)
    return cases


def fixture_size(cases):
    """(requests, tokens per request) of a fixture that holds every case."""
    return max(c[1] for c in cases), max(c[2] for c in cases)


def fmt_case(case):
    return "n={} B={} ctx={} {}".format(*case)


def case_seed(next_n, bs, ctx, kind):
    return (next_n * 1_000_003 + bs * 10_007 + ctx * 31 + (1 if kind == "ragged" else 0)) % (2**31)


def make_lengths(kind: str, bs: int, ctx: int, next_n: int):
    if kind == "uniform":
        return [ctx] * bs
    rng = random.Random(f"ragged-{bs}-{ctx}")
    lengths = [rng.randint(max(next_n + 1, ctx // 16), ctx) for _ in range(bs)]
    lengths[0] = ctx
    if bs > 1:
        lengths[1] = min(ctx, 1000 + next_n)  # below index_topk: rows padded with -1
    return lengths


def capture_lengths(lengths, next_n):
    """Other lengths for the capture, so the replay sees new ones."""
    return [max(next_n + 1, L // 2 + 7) for L in lengths]


def estimate_s(cases, modes, iters, reps, patched):
    """Seconds the timed replays of ``cases`` take on an H200: a step of the per-token layout costs
    about 8 us plus 3.75e-5 us per (token, key) of the batch (the committed v0.5.14 full grid: 952 us
    at 128 x 3 x 64k, 12 us at 1 x 2 x 4k); each timed variant replays (3 + reps * iters) times, plus
    about 0.15 s per variant for capture, replay checks and comparison."""
    total = 0.0
    variants = 2 if patched else 1
    for next_n, bs, ctx, kind in cases:
        keys = ctx if kind == "uniform" else ctx * 17 // 32  # ragged: uniform in [ctx/16, ctx]
        step_s = (8 + 3.75e-5 * bs * next_n * keys) * 1e-6
        for graph in modes:
            timed = (3 + reps * iters) * step_s if graph else 0.0
            total += variants * (timed + 0.15)
    return total
