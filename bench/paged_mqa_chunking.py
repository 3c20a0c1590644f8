"""Does SM90 need sglang 0.5.23's chunked paged-MQA logits? DeepGEMM's kernel alone, on the GPU.

sglang 0.5.23's ``Indexer._get_topk_paged`` splits the paged-MQA logits of a forward into DeepGEMM
calls of at most ``sm_count`` rows (``_chunked_fp8_paged_mqa_logits``; its comment names an SM100
limit, but it runs on every GPU): per chunk a fresh schedule (``get_paged_mqa_logits_metadata``), a
``fp8_paged_mqa_logits`` call, and a ``torch.cat`` of the chunks. Per case this times, in one run:

- ``one_call``: one ``fp8_paged_mqa_logits`` over all rows, with the schedule made outside the timed
  call, as sglang makes it once per forward in the backend's metadata;
- ``chunked``: what 0.5.23 does inside each layer when the rows outnumber the SMs (its loop written
  again here: chunk schedules, calls, ``torch.cat``);

for one query token per row (per-token, as 0.5.23 runs SM90 target_verify) and, for even next_n, two
(``[B, 2]`` rows for next_n 2, pairs for 4 and 6, as the series' SM90 patch runs them), so the pairing
gain is reported with and without the chunking. Modes: ``graph`` (a CUDA graph replayed; the logits as
wide as a captured context, ``--graph-width``, as sglang's graphs make them) and ``eager`` (wall clock
per call with the host's launches, the logits as wide as the batch's longest request).

Checked per case: the chunked logits equal the one-call logits bit for bit on every attended position
(``logits_identical``). No sglang code runs here; ``bench/indexer_step.py`` times the indexer step
through sglang's own ``_get_topk_paged``.

    python bench/paged_mqa_chunking.py --out DIR [--deadline-s 200]

``--engine`` times the calls sglang's engine makes instead (issue 46: in the engine the one call's kernel
was slower than the chunks above about 150 rows, where this grid said the chunks cost more), per case of
ENGINE_CASES, CUDA graphs only:

- the engine's rows: request-major (a request's next_n one-token rows adjacent, as ``dsa_backend`` expands
  them), KV lengths of ``bench/engine_ab.py``'s case (uniform: every prompt ctx tokens; ragged: its RNG)
  plus the drafts, each request's pages contiguous in the pool as a fresh engine's prefill leaves them
  (``--pages scattered`` for random pages);
- the engine's schedule: the one call's built outside the captured graph once per forward (sglang
  0.5.23's ``_refresh_paged_mqa_schedule_metadata`` at replay), the chunks' built inside it per chunk and
  layer (``_chunked_fp8_paged_mqa_logits``);
- the engine's graph width: logits and block table as wide as the captured context (``--graph-width``,
  default the case's context plus engine_ab's 1024 and sglang's req_to_token headroom, about 128);
- one token per row, and for even next_n two (pairs, as the series' row-width patch runs them);
- each in the engine's row order and token-major (token j of every request, then token j + 1: a
  request's rows far apart), to test whether chunks of at most ``sm_count`` rows win because a request's
  rows then run at once on neighbouring SMs and share its KV pages in L2, where one call gives each SM
  ``rows / sm_count`` rows one after another and reads a request's KV from HBM up to next_n times.

Per arm: the graph's time per call (one layer), the paged-MQA kernel's own time in it (torch.profiler,
the kernels the engine's profile counts: name with ``paged_mqa_logits``, not ``metadata``), and unique-KV
bytes per second (each page of the batch once, over the kernel time). ``--padded`` adds graphs captured
for more requests than they replay (sglang fills the rest with length 1): the two-token rule reads the
captured size, so these time both widths where that choice is furthest from the real batch's.

    python bench/paged_mqa_chunking.py --engine [--padded] --out DIR [--graph-width KEYS] [--pages scattered]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paged_mqa import (  # noqa: E402
    DIM,
    HEADS,
    PAGE,
    PAGE_BYTES,
    Batch,
    attended_equal,
    captured,
    make_batch,
    make_kv_pool,
    result_name,
    run_facts,
    schedule_for,
    time_calls,
)

CTX = [2048, 16384, 65536, 131072]
BATCH_SIZES = [16, 32, 64, 128]
NEXT_N = [1, 2, 3, 4, 5, 6]
GRAPH_WIDTH = 131072


def rows_of(batch: Batch, tokens: int):
    """(q, weights, context lengths, block-table rows) of ``batch`` with ``tokens`` query tokens per row."""
    n = batch.q_fp8.shape[0]
    return (
        batch.q_fp8.view(n // tokens, tokens, HEADS, DIM),
        batch.weights,
        batch.ctx_lens.view(n // tokens, tokens),
        batch.block_table[:n:tokens],
    )


def one_call(deep_gemm, kv_pool, batch: Batch, tokens: int, schedule):
    q, w, ctx, table = rows_of(batch, tokens)
    return deep_gemm.fp8_paged_mqa_logits(
        q, kv_pool, w, ctx, table, schedule, batch.max_context_len, clean_logits=False
    )


def chunked(deep_gemm, kv_pool, batch: Batch, tokens: int, sm_count: int):
    """0.5.23's chunks: at most ``sm_count`` rows a call, each with its own schedule, then one cat."""
    import torch

    q, w, ctx, table = rows_of(batch, tokens)
    rows = q.shape[0]
    if rows <= sm_count:
        return one_call(deep_gemm, kv_pool, batch, tokens, schedule_for(deep_gemm, ctx))
    parts = []
    for start in range(0, rows, sm_count):
        end = min(start + sm_count, rows)
        chunk_ctx = ctx[start:end]
        parts.append(
            deep_gemm.fp8_paged_mqa_logits(
                q[start:end],
                kv_pool,
                w[start * tokens : end * tokens],
                chunk_ctx,
                table[start:end],
                schedule_for(deep_gemm, chunk_ctx),
                batch.max_context_len,
                clean_logits=False,
            )
        )
    return torch.cat(parts, dim=0)


def widened(batch: Batch, width: int) -> Batch:
    """The batch with its block table as wide as a captured context of ``width`` keys (zeros past each
    request's pages), as a CUDA graph captured for that context replays it."""
    import torch

    pages = math.ceil(width / PAGE)
    table = batch.block_table
    if table.shape[1] < pages:
        pad = torch.zeros((table.shape[0], pages - table.shape[1]), dtype=table.dtype, device=table.device)
        table = torch.cat([table, pad], dim=1).contiguous()
    return Batch(batch.next_n, batch.seq_lens, batch.q_fp8, batch.weights, batch.ctx_lens, table, pages * PAGE)


def time_eager(fn, batches: list[Batch], reps: int) -> float:
    """Median wall-clock microseconds per call, host launches included: the calls of every rotation, then a
    synchronise, ``reps`` times, after one warm-up pass."""
    import torch

    for b in batches:
        fn(b)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for b in batches:
            fn(b)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6 / len(batches))
    return statistics.median(samples)


def cases(args) -> list[tuple[int, int, int]]:
    """(next_n, batch size, ctx) where a chunk boundary exists for one query token per row (more rows than
    SMs), smallest reads first so that a run cut by its deadline keeps the most cases."""
    picked = [
        (n, b, c)
        for n in args.next_n
        for b in args.batch_sizes
        for c in args.ctx
        if b * n > args.num_sms and b * c <= args.max_batch_tokens
    ]
    return sorted(picked, key=lambda case: case[0] * case[1] * case[2])


def ragged_lengths(rng: random.Random, batch_size: int, ctx: int) -> list[int]:
    """Uniform in [ctx/2, ctx], one request at ctx."""
    return [ctx] + [rng.randint(ctx // 2, ctx) for _ in range(batch_size - 1)]


def measure_case(deep_gemm, kv_pool, case, mode: str, args, rng, gen) -> dict:
    import torch

    n, b, c = case
    sm_count = args.num_sms
    pages_per_set = b * math.ceil(c / PAGE)
    rotations = max(1, min(args.max_calls, math.ceil(3 * args.l2_bytes / (pages_per_set * PAGE_BYTES))))
    perm = torch.randperm(kv_pool.shape[0], device="cuda", generator=gen)
    batches = [
        make_batch(ragged_lengths(rng, b, c), n, perm[r * pages_per_set : (r + 1) * pages_per_set], "cuda", gen)
        for r in range(rotations)
    ]
    if mode == "graph":
        batches = [widened(batch, args.graph_width) for batch in batches]
    timer = time_calls if mode == "graph" else time_eager
    row = {
        "next_n": n,
        "batch_size": b,
        "ctx": c,
        "lengths": "ragged",
        "mode": mode,
        "logits_width": batches[0].max_context_len,
        "calls_per_measure": rotations,
        "num_sms": sm_count,
    }
    for tokens in (1, 2) if n % 2 == 0 else (1,):
        name = "per_token" if tokens == 1 else "two_token"
        rows = b * n // tokens
        schedules = {id(x): schedule_for(deep_gemm, rows_of(x, tokens)[2]) for x in batches}
        row[f"{name}_rows"] = rows
        row[f"{name}_chunks"] = math.ceil(rows / sm_count)
        t_one = timer(lambda x: one_call(deep_gemm, kv_pool, x, tokens, schedules[id(x)]), batches, args.reps)
        row[f"{name}_one_call_us"] = t_one
        if rows > sm_count:
            t_chunked = timer(lambda x: chunked(deep_gemm, kv_pool, x, tokens, sm_count), batches, args.reps)
            ref = one_call(deep_gemm, kv_pool, batches[0], tokens, schedules[id(batches[0])])
            got = chunked(deep_gemm, kv_pool, batches[0], tokens, sm_count)
            row[f"{name}_chunked_us"] = t_chunked
            row[f"{name}_chunk_cost"] = t_chunked / t_one
            row[f"{name}_logits_identical"] = attended_equal(batches[0], ref.view(b * n, -1), got.view(b * n, -1))
        else:  # 0.5.23 makes one call here too
            row[f"{name}_chunked_us"] = t_one
            row[f"{name}_chunk_cost"] = 1.0
    if n % 2 == 0:
        row["pairing_gain_one_call"] = row["per_token_one_call_us"] / row["two_token_one_call_us"]
        row["pairing_gain_chunked"] = row["per_token_chunked_us"] / row["two_token_chunked_us"]
    del batches
    torch.cuda.empty_cache()
    return row


def say(row: dict) -> None:
    text = (
        f"{row['mode']:5s} next_n={row['next_n']} B={row['batch_size']:3d} ctx={row['ctx']:6d}: per-token "
        f"{row['per_token_one_call_us']:8.1f} us one call, {row['per_token_chunked_us']:8.1f} us chunked "
        f"(x{row['per_token_chunk_cost']:.2f})"
    )
    if "two_token_one_call_us" in row:
        text += (
            f"; two per row {row['two_token_one_call_us']:8.1f} / {row['two_token_chunked_us']:8.1f} us, "
            f"pairing x{row['pairing_gain_one_call']:.2f} one call, x{row['pairing_gain_chunked']:.2f} chunked"
        )
    print(text, flush=True)


def summary(rows: list[dict]) -> dict:
    """What the run settles: the chunks' cost and whether they ever won, per mode."""
    out = {}
    for mode in sorted({r["mode"] for r in rows}):
        chunked = [r for r in rows if r["mode"] == mode and r["per_token_rows"] > r["num_sms"]]
        costs = [r["per_token_chunk_cost"] for r in chunked]
        out[mode] = {
            "cases": len(chunked),
            "per_token_chunk_cost_min": min(costs, default=None),
            "per_token_chunk_cost_max": max(costs, default=None),
            "logits_identical": sum(r.get("per_token_logits_identical", False) for r in chunked),
            "pairing_gain_one_call": sorted(
                r["pairing_gain_one_call"] for r in chunked if "pairing_gain_one_call" in r
            ),
        }
    return out


def run(args) -> dict:
    import deep_gemm
    import torch

    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    args.l2_bytes = getattr(props, "L2_cache_size", 60 << 20)
    args.num_sms = deep_gemm.get_num_sms()
    todo = cases(args)
    pool_pages = max(b * math.ceil(c / PAGE) for _, b, c in todo) * 2
    print(f"{len(todo)} cases x {len(args.modes)} modes; KV pool {pool_pages * PAGE_BYTES / 2**30:.2f} GiB", flush=True)
    kv_pool = make_kv_pool(pool_pages, torch.device("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(7)
    rng = random.Random(11)
    result = {
        **run_facts(torch.device("cuda"), args.num_sms, args.reps),
        "command": "python bench/paged_mqa_chunking.py " + shlex.join(sys.argv[1:]),
        "graph_width": args.graph_width,
        "rows": [],
        "partial": False,
    }
    deadline = time.monotonic() + args.deadline_s
    for case in todo:
        for mode in args.modes:
            if time.monotonic() > deadline:
                result["partial"] = True
                continue
            row = measure_case(deep_gemm, kv_pool, case, mode, args, rng, gen)
            result["rows"].append(row)
            say(row)
            write(result, args.out)
    result["summary"] = summary(result["rows"])
    write(result, args.out)
    return result


def write(result: dict, out: str, stem: str = "paged_mqa_chunking") -> None:
    path = Path(out) / (result_name(stem, result) + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


# ---------------------------------------------------------------- the engine's calls (--engine)

# (next_n, requests, ctx, lengths): the sizes of issue 46's engine rows: next_n 3 (one token per row) above
# and below 132 rows, next_n 4 with pairs above and below 132 two-token rows, and plain decode above 132.
ENGINE_CASES = [
    (3, 96, 16384, "uniform"),
    (3, 64, 32768, "ragged"),
    (3, 48, 16384, "uniform"),
    (4, 128, 16384, "uniform"),
    (4, 64, 16384, "uniform"),
    (1, 160, 16384, "uniform"),
    (1, 256, 16384, "uniform"),
]
# (next_n, captured requests, real requests, ctx): graphs padded past the real batch, at the sizes where the
# two-token rule (16 two-token rows, from the captured size) and the real batch disagree most; the full
# graph of each as its reference.
PADDED_CASES = [
    (n, captured, real, ctx)
    for ctx in (4096, 16384)
    for n, captured, reals in ((2, 16, (2, 4, 8, 16)), (4, 8, (1, 2, 4, 8)), (6, 6, (1, 3, 6)))
    for real in reals
]
# engine_ab asks for context_length = the grid's longest context + 1024; sglang's req_to_token adds room
# for the drafts and the page (with page 64 and MTP, under 128 tokens).
ENGINE_CONTEXT_EXTRA = 1024
REQ_TO_TOKEN_HEADROOM = 128
SEQ_LEN_FILL = 1  # what sglang's DSA backend gives a padded request in a CUDA graph


def engine_graph_width(ctx: int) -> int:
    """Keys a captured graph's logits hold in engine_ab's engine for a grid whose longest context is ctx."""
    return math.ceil((ctx + ENGINE_CONTEXT_EXTRA + REQ_TO_TOKEN_HEADROOM) / PAGE) * PAGE


def engine_lengths(batch_size: int, ctx: int, lengths: str, next_n: int) -> list[int]:
    """KV lengths at a verify forward of engine_ab's case: its prompts (uniform: ctx tokens each; ragged:
    ``randint(ctx // 2, ctx)`` from its RNG seeded with the case, as ``Case.requests`` draws them) plus the
    next_n tokens being verified."""
    rng = random.Random(f"{batch_size}-{ctx}-{lengths}")
    prompts = [ctx if lengths == "uniform" else rng.randint(ctx // 2, ctx) for _ in range(batch_size)]
    return [n + next_n for n in prompts]


def padded_lengths(captured: int, real: int, ctx: int, next_n: int) -> list[int]:
    """A graph captured for ``captured`` requests replayed with ``real``: the rest at sglang's fill length."""
    return [ctx + next_n] * real + [SEQ_LEN_FILL + next_n] * (captured - real)


def page_ranges(seq_lens: list[int], start: int, layout: str, gen, device):
    """Physical pages for the requests from page ``start`` on: each request's pages in a row (as a fresh
    engine's prefill allocates them), or the same pages shuffled."""
    import torch

    total = sum(math.ceil(n / PAGE) for n in seq_lens)
    pages = torch.arange(start, start + total, device=device)
    if layout == "scattered":
        pages = pages[torch.randperm(total, device=device, generator=gen)]
    return pages


def token_major(batch_size: int, next_n: int, tokens: int) -> list[int]:
    """Per-token row order with the rows of ``tokens`` tokens taken token-major: unit k of every request,
    then unit k + 1 (a unit is one token, or a pair of consecutive ones); each unit's tokens stay adjacent."""
    units = next_n // tokens
    return [b * next_n + k * tokens + t for k in range(units) for b in range(batch_size) for t in range(tokens)]


def reordered(batch: Batch, order: list[int]) -> Batch:
    """``batch`` with its per-token rows in ``order`` (copies, made before anything is timed)."""
    import torch

    idx = torch.tensor(order, device=batch.q_fp8.device)
    return Batch(
        batch.next_n,
        batch.seq_lens,
        batch.q_fp8[idx].contiguous(),
        batch.weights[idx].contiguous(),
        batch.ctx_lens[idx].contiguous(),
        batch.block_table[idx].contiguous(),
        batch.max_context_len,
    )


def kernel_us(events, calls: int) -> float:
    """Microseconds of paged-MQA logits kernels per call, from profiler events (name, device us)."""
    total = sum(us for name, us in events if "paged_mqa_logits" in name and "metadata" not in name)
    return total / calls


def time_graph(graph, calls: int, reps: int) -> dict:
    """The graph's median microseconds per call over ``reps`` replays, and its paged-MQA kernels' own."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.replay()
        torch.cuda.synchronize()
    events = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type.name == "CUDA"]
    return {"graph_us": statistics.median(samples), "kernel_us": kernel_us(events, calls * reps) or None}


def engine_arms(batch_size: int, next_n: int, sm_count: int) -> list[tuple[int, str, str]]:
    """(tokens per row, row order, call) of one case: one token per row, and two for even next_n; the
    engine's order, and token-major where a request has more than one row; one call, and 0.5.23's chunks
    where the rows outnumber the SMs."""
    arms = []
    for tokens in (1, 2) if next_n % 2 == 0 else (1,):
        rows = batch_size * next_n // tokens
        for order in ("request", "token") if next_n // tokens > 1 else ("request",):
            for call in ("one_call", "chunks") if rows > sm_count else ("one_call",):
                arms.append((tokens, order, call))
    return arms


def engine_batches(case_lengths: list[int], next_n: int, width: int, args, gen, pool_pages: int) -> list[Batch]:
    """The rotations of one case, each over its own stretch of the pool (L2 is three times covered), as wide
    as the captured graph."""
    set_pages = sum(math.ceil(n / PAGE) for n in case_lengths)
    rotations = max(1, min(args.max_calls, math.ceil(3 * args.l2_bytes / (set_pages * PAGE_BYTES))))
    rotations = min(rotations, pool_pages // set_pages)
    out = []
    for r in range(rotations):
        pages = page_ranges(case_lengths, r * set_pages, args.pages, gen, "cuda")
        out.append(widened(make_batch(case_lengths, next_n, pages, "cuda", gen), width))
    return out


def measure_engine_arm(deep_gemm, kv_pool, batches: list[Batch], arm, sm_count: int, reps: int) -> dict:
    tokens, order, call = arm
    b, n = batches[0].batch_size, batches[0].next_n
    if order == "token":
        batches = [reordered(x, token_major(b, n, tokens)) for x in batches]
    if call == "one_call":  # the schedule outside the graph, once per forward, as the backend builds it
        schedules = {id(x): schedule_for(deep_gemm, rows_of(x, tokens)[2]) for x in batches}
        fn = lambda x: one_call(deep_gemm, kv_pool, x, tokens, schedules[id(x)])  # noqa: E731
    else:  # per chunk, inside the graph
        fn = lambda x: chunked(deep_gemm, kv_pool, x, tokens, sm_count)  # noqa: E731
    timed = time_graph(captured(fn, batches), len(batches), reps)
    basis = "kernel" if timed["kernel_us"] else "graph"  # the profiler may see no kernel inside a graph
    kv_TBps = batches[0].kv_bytes() / (timed[f"{basis}_us"] * 1e-6) / 1e12
    return {"tokens": tokens, "order": order, "call": call, **timed, "kv_TBps": kv_TBps, "kv_TBps_over": basis}


def engine_row(deep_gemm, kv_pool, case, args, gen, pool_pages: int) -> dict:
    import torch

    next_n, b, ctx, lengths = case[:4]
    width = args.graph_width or engine_graph_width(ctx)
    seq_lens = padded_lengths(b, case[4], ctx, next_n) if len(case) > 4 else engine_lengths(b, ctx, lengths, next_n)
    batches = engine_batches(seq_lens, next_n, width, args, gen, pool_pages)
    arms = engine_arms(b, next_n, args.num_sms) if len(case) == 4 else [(t, "request", "one_call") for t in (1, 2)]
    row = {
        "next_n": next_n,
        "batch_size": b,
        "ctx": ctx,
        "lengths": lengths,
        "real_requests": case[4] if len(case) > 4 else b,
        "graph_width": batches[0].max_context_len,
        "pages": args.pages,
        "calls_per_measure": len(batches),
        "kv_bytes": batches[0].kv_bytes(),
        "arms": [measure_engine_arm(deep_gemm, kv_pool, batches, arm, args.num_sms, args.reps) for arm in arms],
    }
    row["logits_identical"] = engine_logits_identical(deep_gemm, kv_pool, batches[0], arms, args.num_sms)
    del batches
    torch.cuda.empty_cache()
    return row


def engine_logits_identical(deep_gemm, kv_pool, batch: Batch, arms, sm_count: int) -> bool:
    """Every arm's logits, back in the engine's row order, equal one token per row in one call where attended."""
    b, n = batch.batch_size, batch.next_n
    reference = one_call(deep_gemm, kv_pool, batch, 1, schedule_for(deep_gemm, rows_of(batch, 1)[2])).view(b * n, -1)
    for tokens, order, call in arms:
        x = reordered(batch, token_major(b, n, tokens)) if order == "token" else batch
        if call == "one_call":
            got = one_call(deep_gemm, kv_pool, x, tokens, schedule_for(deep_gemm, rows_of(x, tokens)[2]))
        else:
            got = chunked(deep_gemm, kv_pool, x, tokens, sm_count)
        got = got.view(b * n, -1)
        if order == "token":
            got = got[inverse(token_major(b, n, tokens))]
        if not attended_equal(batch, reference, got):
            return False
    return True


def inverse(order: list[int]) -> list[int]:
    out = [0] * len(order)
    for position, row in enumerate(order):
        out[row] = position
    return out


def say_engine(row: dict) -> None:
    head = (
        f"next_n={row['next_n']} {row['real_requests']}/{row['batch_size']} x {row['ctx'] // 1024}k {row['lengths']} "
        f"(width {row['graph_width']}, {row['pages']} pages):"
    )
    arms = "; ".join(
        f"{a['tokens']}/row {a['order']}-major {a['call']} {a['graph_us']:.1f} us (kernel "
        f"{'-' if a['kernel_us'] is None else format(a['kernel_us'], '.1f')} us, {a['kv_TBps']:.2f} TB/s unique KV)"
        for a in row["arms"]
    )
    print(f"{head} {arms}; logits identical: {row['logits_identical']}", flush=True)


def engine_summary(rows: list[dict]) -> dict:
    """Per case: each arm's kernel time over the engine's pristine call (one token per row, request-major,
    chunks where 0.5.23 makes them)."""
    out = {}
    for row in rows:
        arms = {(a["tokens"], a["order"], a["call"]): a for a in row["arms"]}
        pristine = arms.get((1, "request", "chunks")) or arms[(1, "request", "one_call")]
        name = f"n{row['next_n']}-{row['real_requests']}of{row['batch_size']}-{row['ctx'] // 1024}k-{row['lengths']}"
        basis = "kernel_us" if all(a["kernel_us"] for a in arms.values()) else "graph_us"
        out[name] = {f"{t}/row {o}-major {c}": round(a[basis] / pristine[basis], 3) for (t, o, c), a in arms.items()}
        out[name]["over"] = basis
    return out


def run_engine(args) -> dict:
    import deep_gemm
    import torch

    torch.cuda.init()
    args.l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20)
    args.num_sms = deep_gemm.get_num_sms()
    todo = list(ENGINE_CASES) + ([(n, c, ctx, "uniform", r) for n, c, r, ctx in PADDED_CASES] if args.padded else [])
    pool_pages = max(sum(math.ceil(n / PAGE) for n in engine_lengths(b, ctx, d, nn)) for nn, b, ctx, d in ENGINE_CASES)
    pool_pages *= 2
    print(f"{len(todo)} cases; KV pool {pool_pages * PAGE_BYTES / 2**30:.2f} GiB", flush=True)
    kv_pool = make_kv_pool(pool_pages, torch.device("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(7)
    result = {
        **run_facts(torch.device("cuda"), args.num_sms, args.reps),
        "deep_gemm_module": {"file": deep_gemm.__file__, "version": getattr(deep_gemm, "__version__", None)},
        "command": "python bench/paged_mqa_chunking.py " + shlex.join(sys.argv[1:]),
        "rows": [],
        "partial": False,
    }
    deadline = time.monotonic() + args.deadline_s
    for case in todo:
        if time.monotonic() > deadline:
            result["partial"] = True
            continue
        row = engine_row(deep_gemm, kv_pool, case, args, gen, pool_pages)
        result["rows"].append(row)
        say_engine(row)
        write(result, args.out, "paged_mqa_engine_calls")
    result["summary"] = engine_summary(result["rows"])
    write(result, args.out, "paged_mqa_engine_calls")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "build/bench"))
    parser.add_argument("--next-n", type=int, nargs="+", default=NEXT_N)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES)
    parser.add_argument("--ctx", type=int, nargs="+", default=CTX)
    parser.add_argument("--modes", nargs="+", default=["graph", "eager"], choices=["graph", "eager"])
    parser.add_argument(
        "--graph-width",
        type=int,
        default=None,
        help=f"keys a captured graph's logits hold (grid: {GRAPH_WIDTH}; --engine: each case's engine_graph_width)",
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=128 * 131072,
        help="leave out cases whose requests hold more KV tokens than this (time on the GPU)",
    )
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--max-calls", type=int, default=8)
    parser.add_argument("--deadline-s", type=float, default=240.0, help="start no case after this many seconds")
    parser.add_argument("--engine", action="store_true", help="the engine's calls (ENGINE_CASES), not the grid")
    parser.add_argument("--padded", action="store_true", help="with --engine: also PADDED_CASES")
    parser.add_argument("--pages", choices=["contiguous", "scattered"], default="contiguous", help="with --engine")
    args = parser.parse_args(argv)
    if args.engine:
        result = run_engine(args)
        print(json.dumps(result["summary"], indent=1))
        return 0
    args.graph_width = args.graph_width or GRAPH_WIDTH
    result = run(args)
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
