"""The SM90 read-once paged-MQA kernel's grid: DeepGEMM's ``fp8_paged_mqa_logits`` per layout, checked and timed.

For each case (heads, next_n, requests, context, lengths) it calls DeepGEMM three ways on the same inputs:

- per-token: one query token per row (q [B*next_n, 1, H, D]), what sglang runs on SM90 for odd next_n;
- paired:    two tokens per row (q [B*next_n/2, 2, H, D]), even next_n: each request's KV read next_n/2 times;
- request:   one row per request (q [B, next_n, H, D]): with the DeepGEMM line's kernel each KV tile is read
  once for every token of the request; with stock DeepGEMM only next_n 1 and 2 are accepted.

Exactness, on the first rotation of every case: the request layout's logits against per-token's, bit for bit on
every attended position (``logits_bit_identical``); where the case is small enough (``--fp64-max-tokens``), both
against a float64 reference computed from the raw fp8 index-K bytes, and the top-k sets (k = ``--topk``, sglang's
2048) against the reference's, every difference counted and classed a near-tie when the reference values it
swaps lie within ``--near-tie`` of the k-th value.

Timing as ``bench/paged_mqa.py``: a CUDA graph of one call per rotation (different pages, q and weights, the KV
of all rotations at least three times the L2), replayed ``--reps`` times, median per call; schedules made outside
the graph.  Run once per DeepGEMM build (``--label``), each in its own process: ``report`` then joins the runs
(speedups against the stock build's best layout, the fraction of the H200's limit) into one JSON and a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import re
import shlex
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.gpu_clocks import ClockSampler  # noqa: E402
from bench.paged_mqa import (  # noqa: E402
    DIM,
    PAGE,
    PAGE_BYTES,
    attended_equal,
    layout_schedule,
    make_batches,
    make_kv_pool,
    plan_pool,
    run_layout,
    time_layout,
)

# The limits the fraction is taken of (vendor figures: HBM bandwidth and dense FP8 tensor rate), by the
# device's name as torch gives it; a device not listed gets no fraction rather than another chip's.
DEVICE_LIMITS = {
    "NVIDIA H200": {"tag": "h200", "hbm_bytes_per_s": 4.8e12, "fp8_flop_per_s": 1979e12},
    "NVIDIA H100 80GB HBM3": {"tag": "h100", "hbm_bytes_per_s": 3.35e12, "fp8_flop_per_s": 1979e12},
}
LAYOUTS = ("per_token", "paired", "native")


def layouts_for(next_n: int, wanted) -> list[str]:
    """The layouts a case runs: paired only for even next_n >= 4 (at 2 it is the request layout itself)."""
    return [lay for lay in wanted if lay != "paired" or (next_n >= 4 and next_n % 2 == 0)]


def device_limits(name: str):
    """The limits of the device torch names ``name`` (its entry of DEVICE_LIMITS), or None for one not listed."""
    return DEVICE_LIMITS.get(name)


def limit_us(next_n: int, heads: int, seq_lens, logits_width: int, limits=None) -> float:
    """The fewest microseconds the device allows (``limits``, the H200's when None): KV read once (132 bytes a
    token), q and weights read, the logits row of every token written (float32, the kernel's width), against
    next_n * heads * 2 * DIM FLOP a KV token."""
    limits = limits or DEVICE_LIMITS["NVIDIA H200"]
    kv_tokens = sum(math.ceil(n / PAGE) * PAGE for n in seq_lens)
    tokens = len(seq_lens) * next_n
    moved = kv_tokens * (PAGE_BYTES // PAGE) + tokens * heads * (DIM + 4) + tokens * logits_width * 4
    flops = kv_tokens * next_n * heads * 2 * DIM
    return max(moved / limits["hbm_bytes_per_s"], flops / limits["fp8_flop_per_s"]) * 1e6


def reference_logits(kv_pool, batch, heads: int):
    """float64 logits [B*next_n, width] from the raw fp8 bytes: per token row, the sum over heads of
    weight * relu(q . k), times the key's scale; positions a row does not attend are NaN."""
    import torch

    pages = kv_pool.view(kv_pool.shape[0], -1)
    n = batch.next_n
    width = batch.max_context_len
    out = torch.full((batch.batch_size * n, width), float("nan"), dtype=torch.float64, device=kv_pool.device)
    table = batch.block_table[::n]
    for b, length in enumerate(batch.seq_lens):
        blocks = table[b, : math.ceil(length / PAGE)].long()
        raw = pages[blocks]
        keys = raw[:, : PAGE * DIM].contiguous().view(torch.float8_e4m3fn).double().view(-1, DIM)
        scales = raw[:, PAGE * DIM :].contiguous().view(torch.float32).double().view(-1)
        q = batch.q_fp8[b * n : (b + 1) * n].double()  # [n, H, D]
        w = batch.weights[b * n : (b + 1) * n].double()  # [n, H]
        scores = torch.einsum("thd,kd->thk", q, keys).clamp_(min=0)
        logits = torch.einsum("th,thk->tk", w, scores) * scales
        for t in range(n):
            seen = int(batch.ctx_lens[b * n + t])
            out[b * n + t, :seen] = logits[t, :seen]
    return out


def topk_agreement(got, ref, ctx_lens, k: int, near_tie: float) -> dict:
    """Per row, the top-k positions of ``got`` against the reference's (attended positions only): how many rows
    differ, how many positions are swapped, and how many of those are near-ties (reference value within
    ``near_tie`` of the row's k-th reference value, relative to that row's largest magnitude)."""
    import torch

    rows_differ = swapped = near = 0
    for r in range(got.shape[0]):
        seen = int(ctx_lens[r])
        kk = min(k, seen)
        g = got[r, :seen].double()
        f = ref[r, :seen]
        top_g = set(torch.topk(g, kk).indices.tolist())
        ref_vals, ref_idx = torch.topk(f, kk)
        diff = top_g.symmetric_difference(ref_idx.tolist())
        if not diff:
            continue
        rows_differ += 1
        swapped += len(diff) // 2
        kth = float(ref_vals[-1])
        scale = float(f.abs().max()) or 1.0
        near += sum(1 for i in diff if abs(float(f[i]) - kth) <= near_tie * scale) // 2
    return {"topk_rows_differ": rows_differ, "topk_swapped": swapped, "topk_swapped_near_ties": near}


def check_case(deep_gemm, kv_pool, batch, heads: int, args) -> dict:
    """Exactness of the request layout on one batch: bit-identity to per-token, and the float64 check."""
    import torch

    per_token = run_layout(deep_gemm, kv_pool, batch, "per_token")
    try:
        request = run_layout(deep_gemm, kv_pool, batch, "native")
    except RuntimeError as exc:  # stock DeepGEMM refuses next_n > 2 on SM90 (its host check)
        return {"request_layout_error": str(exc).splitlines()[0][:200]}
    out = {"logits_bit_identical": attended_equal(batch, per_token, request)}
    if batch.batch_size * batch.next_n * max(batch.seq_lens) <= args.fp64_max_tokens:
        ref = reference_logits(kv_pool, batch, heads)
        mask = ~torch.isnan(ref)
        err = (request.double()[mask] - ref[mask]).abs().max() / ref[mask].abs().max()
        out["fp64_positions"] = int(mask.sum())
        out["fp64_max_rel_err"] = float(err)
        out.update(topk_agreement(request, ref, batch.ctx_lens, args.topk, args.near_tie))
    return out


def cases(args):
    """(next_n, B, ctx, lengths, heads) (bench/paged_mqa.py's case and the heads): the --extra cases first (a
    run stopped at its time limit keeps them), then the grid's others."""
    grid = [
        (n, b, c, d, h)
        for h in args.heads
        for d in args.lengths
        for n in args.next_n
        for c in args.ctx
        for b in args.batch_sizes
    ]
    extra = []
    for spec in args.extra:  # heads:next_n:B:ctx:lengths, next_n may be "all"
        h, n, b, c, d = spec.split(":")
        for nn in args.next_n if n == "all" else [int(n)]:
            extra.append((nn, int(b), int(c), d, int(h)))
    return extra + [c for c in grid if c not in extra]


def run(args, save) -> dict:
    """Every case's row; ``save(result)`` after each, so a run cut short keeps the rows it finished."""
    import deep_gemm
    import torch

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    gen = torch.Generator(device=device).manual_seed(1234)
    rng = random.Random(99)
    configs = cases(args)
    plans, max_pages = plan_pool(configs, args, getattr(props, "L2_cache_size", 60 << 20))
    print(f"[{args.label}] {len(configs)} cases; KV pool {max_pages * PAGE_BYTES / 2**30:.2f} GiB", flush=True)
    kv_pool = make_kv_pool(max_pages, device)
    rows = []
    limits = device_limits(torch.cuda.get_device_name(device))
    result = {
        "label": args.label,
        "device": torch.cuda.get_device_name(device),
        "limit": limits,
        "num_sms": deep_gemm.get_num_sms(),
        "torch": torch.__version__,
        "reps": args.reps,
        "pages": args.pages,
        "rows": rows,
    }
    # one sampler for the whole grid, its samples timestamped: each layout's timing gets those of its window
    clocks = ClockSampler(interval_ms=20)
    try:
        with clocks:
            for case in configs:
                rows.append(run_case(deep_gemm, kv_pool, case, plans, max_pages, rng, gen, device, args, limits))
                print(f"[{args.label}] " + line(rows[-1]), flush=True)
                save(result)
                torch.cuda.empty_cache()
    finally:
        attach_clocks(rows, clocks)
        result["gpu_clocks"] = clocks.summary
        save(result)
    return result


def weights_dtype_for(label: str, specs) -> str:
    """The head weights' dtype of the run labelled ``label``: the last of ``specs`` that is a plain dtype or
    ``LABEL=dtype`` for this label (grid arguments go to every build's run; bf16 weights only to the build that
    takes them on SM90); float32 when none."""
    chosen = "float32"
    for spec in specs:
        name, _, dtype = spec.rpartition("=")
        if name in ("", label):
            chosen = dtype
    if chosen not in ("float32", "bfloat16"):
        raise ValueError(f"--weights-dtype: {chosen!r} is not float32 or bfloat16")
    return chosen


def with_weights_dtype(batch, dtype: str):
    """``batch`` with its head weights cast (the float64 reference then takes the cast weights too)."""
    import torch

    return dataclasses.replace(batch, weights=batch.weights.to(getattr(torch, dtype)).contiguous())


def run_case(deep_gemm, kv_pool, case, plans, max_pages, rng, gen, device, args, limits) -> dict:
    n, b, c, d, heads = case
    batches = make_batches(case, plans, max_pages, rng, gen, device, heads, args.pages)
    dtype = weights_dtype_for(args.label, args.weights_dtype)
    batches = [with_weights_dtype(batch, dtype) for batch in batches]
    row = {"heads": heads, "next_n": n, "batch_size": b, "ctx": c, "lengths": d, "calls_per_graph": len(batches)}
    row["weights_dtype"] = dtype
    row["seq_lens_sum"] = sum(batches[0].seq_lens)
    if limits:
        row["limit_us"] = limit_us(n, heads, batches[0].seq_lens, batches[0].max_context_len, limits)
    if "native" in args.layouts:
        row.update(check_case(deep_gemm, kv_pool, batches[0], heads, args))
    for layout in layouts_for(n, args.layouts):
        if layout == "native" and "request_layout_error" in row:
            continue
        start = time.time()
        row[f"{layout}_us"] = time_layout(deep_gemm, kv_pool, batches, layout, args.reps)
        row[f"{layout}_window_s"] = [start, time.time()]
    return row


def attach_clocks(rows: list[dict], clocks: ClockSampler) -> None:
    """Each layout's GPU clocks: the samples taken while it was timed (``<layout>_gpu_clocks``)."""
    for row in rows:
        for layout in LAYOUTS:
            if f"{layout}_window_s" in row:
                row[f"{layout}_gpu_clocks"] = clocks.summary_between(*row[f"{layout}_window_s"])


def line(row: dict) -> str:
    times = " ".join(f"{lay} {row[f'{lay}_us']:.1f}" for lay in LAYOUTS if f"{lay}_us" in row)
    exact = row.get("logits_bit_identical", row.get("request_layout_error", "-"))
    return (
        f"H={row['heads']} next_n={row['next_n']} B={row['batch_size']} ctx={row['ctx']} {row['lengths']}: "
        f"{times} us; bit-identical {exact}; fp64 {row.get('fp64_max_rel_err', '-')}"
    )


def profile(args) -> None:
    """One case's layout called ``--calls`` times, for a profiler (ncu) to catch one call after the warm-up."""
    import deep_gemm
    import torch

    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(1234)
    case = (args.next_n, args.batch_size, args.ctx, args.lengths, args.heads)
    plans, max_pages = plan_pool([case], argparse.Namespace(min_calls=1, max_calls=1), 0)
    kv_pool = make_kv_pool(max_pages, device)
    (batch,) = make_batches(case, plans, max_pages, random.Random(99), gen, device, args.heads)
    batch = with_weights_dtype(batch, weights_dtype_for("", args.weights_dtype))
    schedule = layout_schedule(deep_gemm, batch, args.layout)
    for _ in range(args.calls):
        run_layout(deep_gemm, kv_pool, batch, args.layout, schedule)
    torch.cuda.synchronize()
    print(f"profiled {args.layout}: H={args.heads} next_n={args.next_n} B={args.batch_size} ctx={args.ctx}")


# ---------------------------------------------------------------- report (no GPU)


def run_limits(run_: dict):
    """The limits a run's fractions were taken of: its own record, or (a run from before runs kept one, all of
    them timed with the H200's figures) the H200's."""
    return run_["limit"] if "limit" in run_ else DEVICE_LIMITS["NVIDIA H200"]


def report_name(run_: dict) -> str:
    """paged_mqa_read_once_h200 / _h100 / the device's name in letters and digits: a report names its chip."""
    limits = device_limits(run_.get("device", ""))
    tag = limits["tag"] if limits else re.sub(r"[^a-z0-9]+", "_", run_.get("device", "unknown").lower()).strip("_")
    return f"paged_mqa_read_once_{tag}"


def join(line_run: dict, stock_run: dict | None, base_run: dict | None = None) -> list[dict]:
    """The line's rows with their speedups: over per-token and paired of the same build, over the best
    layout stock DeepGEMM has (per-token, paired, or its own next_n <= 2 row) measured in the stock run, and,
    when a third build ran (``base``: the line without the patch on trial), over that build's request rows."""
    stock = {_key(r): r for r in (stock_run or {}).get("rows", [])}
    base = {_key(r): r for r in (base_run or {}).get("rows", []) if "native_us" in r}
    out = []
    for r in line_run["rows"]:
        row = dict(r)
        if "native_us" in r:
            us = r["native_us"]
            row["us"] = us
            row["kernel_reads_kv_once"] = True
            row["speedup_vs_per_token"] = r["per_token_us"] / us
            if "paired_us" in r:
                row["speedup_vs_paired"] = r["paired_us"] / us
            if "limit_us" in r:
                row["fraction_of_limit"] = r["limit_us"] / us
            today = stock.get(_key(r))
            if today:
                best = min(today[f"{lay}_us"] for lay in LAYOUTS if f"{lay}_us" in today)
                row["best_today_us"] = best
                row["speedup_vs_best_today"] = best / us
                row["per_token_us_stock"] = today["per_token_us"]
            other = base.get(_key(r))
            if other:
                row["base_us"] = other["native_us"]
                row["base_gpu_clocks"] = other.get("native_gpu_clocks")
                row["speedup_vs_base"] = row["base_us"] / us
                row["base_logits_bit_identical"] = other.get("logits_bit_identical")
        out.append(row)
    return out


def _key(row: dict) -> tuple:
    return (row["heads"], row["next_n"], row["batch_size"], row["ctx"], row["lengths"])


def table(rows: list[dict]) -> str:
    head = (
        "| H | next_n | B | ctx | lengths | per-token us | paired us | read-once us | x per-token | x paired "
        "| x best today | of limit | bit-identical | fp64 rel err | top-k swaps (near-ties) | base us | x base |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:

        def f(key, fmt="{:.1f}"):
            return fmt.format(r[key]) if key in r else "-"

        swaps = f"{r['topk_swapped']} ({r['topk_swapped_near_ties']})" if "topk_swapped" in r else "-"
        lines.append(
            f"| {r['heads']} | {r['next_n']} | {r['batch_size']} | {r['ctx'] // 1024}k | {r['lengths']} "
            f"| {f('per_token_us')} | {f('paired_us')} | {f('us')} | {f('speedup_vs_per_token', '{:.2f}x')} "
            f"| {f('speedup_vs_paired', '{:.2f}x')} | {f('speedup_vs_best_today', '{:.2f}x')} "
            f"| {f('fraction_of_limit', '{:.2f}')} | {r.get('logits_bit_identical', '-')} "
            f"| {f('fp64_max_rel_err', '{:.1e}')} | {swaps} | {f('base_us')} | {f('speedup_vs_base', '{:.2f}x')} |"
        )
    return "\n".join(lines)


def report(args) -> None:
    runs = {}
    for path in args.runs:
        with open(path) as f:
            run_ = json.load(f)
        runs[run_["label"]] = run_
    line_run, stock_run = runs.get(args.line_label), runs.get(args.stock_label)
    if line_run is None:  # the line's build or its smoke run failed: the stock rows alone, said so
        print(f"no run labelled {args.line_label!r}: the report holds the stock rows only")
        line_run = {**(stock_run or {"rows": []}), "rows": []}
    facts = {}
    if args.deep_gemm_facts and os.path.exists(args.deep_gemm_facts):
        with open(args.deep_gemm_facts) as f:
            facts = json.load(f)
    rows = join(line_run, stock_run, runs.get(args.base_label))
    result = {
        "what": "DeepGEMM fp8_paged_mqa_logits on SM90 alone (no sglang code), per layout, CUDA graphs",
        "device": line_run["device"],
        "torch": line_run["torch"],
        "reps": line_run["reps"],
        "cuda_graph": True,
        "limit": run_limits(line_run),
        "deep_gemm": facts,
        "runs": {label: {k: v for k, v in r.items() if k != "rows"} for label, r in runs.items()},
        "stock_rows": (stock_run or {}).get("rows", []),
        "rows": rows,
        "commands": {"report": "python " + " ".join(shlex.quote(a) for a in sys.argv)},
    }
    if os.environ.get("BENCH_DEVICE_COMMAND"):
        result["commands"]["device"] = os.environ["BENCH_DEVICE_COMMAND"]
    name = args.name or report_name(line_run)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = table(rows)
    with open(os.path.join(args.out, f"{name}.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    grid = sub.add_parser("grid", help="time and check one DeepGEMM build (GPU)")
    grid.add_argument("--label", required=True, help="the build's name in the report (line / stock)")
    grid.add_argument("--json", required=True, help="where this run's rows go")
    grid.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    grid.add_argument("--heads", type=int, nargs="+", default=[64])
    grid.add_argument("--next-n", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    grid.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    grid.add_argument("--ctx", type=int, nargs="+", default=[4096, 65536])
    grid.add_argument("--lengths", nargs="+", default=["uniform"], choices=["uniform", "ragged"])
    grid.add_argument("--extra", nargs="*", default=[], help="more cases, heads:next_n:B:ctx:lengths (next_n 'all')")
    grid.add_argument("--reps", type=int, default=15)
    grid.add_argument("--min-calls", type=int, default=4)
    grid.add_argument("--max-calls", type=int, default=64)
    grid.add_argument("--fp64-max-tokens", type=int, default=32 * 6 * 65536)
    grid.add_argument("--topk", type=int, default=2048)
    grid.add_argument("--near-tie", type=float, default=1e-5)
    grid.add_argument(
        "--pages",
        default="random",
        choices=["random", "contiguous"],
        help="each rotation's pages scattered over the pool, or each request's in one run (as sglang's engine holds them)",
    )
    weights_help = "the head weights' dtype: float32 (default), bfloat16, or LABEL=dtype for the run of that --label"
    grid.add_argument("--weights-dtype", nargs="+", default=[], help=weights_help)
    prof = sub.add_parser("profile", help="call one case's layout a few times, for ncu (GPU)")
    prof.add_argument("--layout", default="native", choices=LAYOUTS)
    prof.add_argument("--heads", type=int, default=64)
    prof.add_argument("--next-n", type=int, required=True)
    prof.add_argument("--batch-size", type=int, required=True)
    prof.add_argument("--ctx", type=int, default=65536)
    prof.add_argument("--lengths", default="uniform", choices=["uniform", "ragged"])
    prof.add_argument("--calls", type=int, default=3)
    prof.add_argument("--weights-dtype", nargs=1, default=[], choices=["float32", "bfloat16"])
    rep = sub.add_parser("report", help="join the runs into one JSON and table (no GPU)")
    rep.add_argument("runs", nargs="+")
    rep.add_argument("--line-label", default="line")
    rep.add_argument("--stock-label", default="stock")
    rep.add_argument("--base-label", default="base", help="a third build's run, the line without the patch on trial")
    rep.add_argument("--deep-gemm-facts", help="the build's facts JSON (source, commit, line, versions, hashes)")
    rep.add_argument("--out", default=os.environ.get("OUT", "."))
    rep.add_argument("--name", help="the report's file name, .json and .md (default: paged_mqa_read_once_DEVICE)")
    args = parser.parse_args(argv)
    if args.verb in ("report", "profile"):
        (report if args.verb == "report" else profile)(args)
        return
    started = time.time()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)

    def save(result):
        with open(args.json, "w") as f:
            json.dump({**result, "wall_s": round(time.time() - started, 1), "command": command}, f, indent=1)

    # `timeout` stops a grid with SIGTERM: exit through the finally blocks, so the rows so far keep their clocks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(args, save)  # it saves after each case and, last, with the clocks


if __name__ == "__main__":
    main()
