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
    make_batch,
    make_kv_pool,
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


def write(result: dict, out: str) -> None:
    path = Path(out) / "paged_mqa_chunking_h200.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "build/bench"))
    parser.add_argument("--next-n", type=int, nargs="+", default=NEXT_N)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES)
    parser.add_argument("--ctx", type=int, nargs="+", default=CTX)
    parser.add_argument("--modes", nargs="+", default=["graph", "eager"], choices=["graph", "eager"])
    parser.add_argument("--graph-width", type=int, default=GRAPH_WIDTH, help="keys a captured graph's logits hold")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=128 * 131072,
        help="leave out cases whose requests hold more KV tokens than this (time on the GPU)",
    )
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--max-calls", type=int, default=8)
    parser.add_argument("--deadline-s", type=float, default=240.0, help="start no case after this many seconds")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
