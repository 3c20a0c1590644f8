"""Benchmark DeepGEMM paged MQA logits layouts for DSA target_verify (SM90).

Compares, for each (next_n, batch size B, context length), the per-token
layout that sglang v0.5.14 uses on SM90 with the layout the series' patch 1
picks (``select_paged_mqa_layout`` in dsa_backend.py):

- per-token: q [B*next_n, 1, H, D], context lengths [B*next_n, 1], one
  block-table row per token (the repeated rows dsa_backend builds);
- native:    q [B, next_n, H, D], context lengths [B, next_n], every
  next_n-th block-table row (next_n == 2 on SM90);
- paired:    q [B*next_n/2, 2, H, D], context lengths [B*next_n/2, 2], every
  2nd block-table row (even next_n >= 4).

Inputs are built like the DSA indexer's: random bf16 quantised to fp8 e4m3
with one float32 scale per 128-wide row (per token for K, stored after the
page's fp8 data as in the index-K cache; per token and head for q, folded
into the head weights), pages scattered at random over a large pool.

Timing: each measurement is a CUDA graph of several kernel calls, each on a
different rotation of the inputs (different pages, q and weights) so that
the KV read is not served from L2; the graph is replayed several times and
the median time per call is kept.  The schedule metadata is computed outside
the graph, once per rotation, as sglang does once per forward.

What it times: DeepGEMM's ``fp8_paged_mqa_logits`` alone, called with views this file builds
itself (mirroring the patched ``Indexer._get_topk_paged``, not calling it).  No sglang code
runs: not the DSA backend's metadata, not ``_get_topk_paged``, not the top-k transform.  The
whole indexer step through sglang's own code is ``bench/indexer_step.py``.

Also usable from a second machine without a GPU to re-render the table and
plot from a json written earlier with another batch-size threshold:
``python bench/paged_mqa.py --rerender results.json --min-bs N --out DIR``.
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
from dataclasses import dataclass

PAGE = 64  # tokens per KV page (DeepGEMM's block_kv in sglang)
HEADS = 64  # indexer heads
DIM = 128  # indexer head dim
PAGE_BYTES = PAGE * (DIM + 4)  # fp8 values then one float32 scale per token
FP8_MAX = 448.0

# The batch-size rule of an earlier revision of the series (multi-token from 8 requests), kept
# for the "chosen" column of the committed kernel grid; the series' rule now is
# dsa_backend.pick_sm90_tokens_per_row (bench/layout_rule.py applies it to this grid).
DEFAULT_MIN_BS = 8


def tokens_per_row(layout: str, next_n: int) -> int:
    return {"per_token": 1, "native": next_n, "paired": 2}[layout]


def chosen_layout(next_n: int, batch_size: int, min_bs: int) -> str:
    """The SM90 rule of patch 1 (target_verify, no env override)."""
    if next_n < 2 or batch_size < min_bs:
        return "per_token"
    if next_n == 2:
        return "native"
    if next_n % 2 == 0:
        return "paired"
    return "per_token"


# ---------------------------------------------------------------- inputs


def quantize_rows_fp8(x):
    """Per-row (last dim) absmax fp8 e4m3 quantisation: (values, scales)."""
    import torch

    xf = x.float()
    scale = xf.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4) / FP8_MAX
    return (xf / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def make_kv_pool(num_pages: int, device, seed: int = 0, chunk_pages: int = 8192):
    """Index-K cache of ``num_pages`` pages from random bf16, [P, 64, 1, 132] u8."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    pool = torch.empty((num_pages, PAGE_BYTES), dtype=torch.uint8, device=device)
    for start in range(0, num_pages, chunk_pages):
        n = min(chunk_pages, num_pages - start)
        k = torch.randn((n * PAGE, DIM), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
        k_fp8, k_scale = quantize_rows_fp8(k)
        page = pool[start : start + n]
        page[:, : PAGE * DIM] = k_fp8.view(torch.uint8).view(n, PAGE * DIM)
        page[:, PAGE * DIM :] = k_scale.view(n, PAGE).view(torch.uint8)
    return pool.view(num_pages, PAGE, 1, DIM + 4)


def make_queries(num_tokens: int, device, gen, heads: int = HEADS):
    """fp8 q [N, H, D] and float32 weights [N, H] with the q scales folded in."""
    import torch

    q = torch.randn((num_tokens, heads, DIM), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    q_fp8, q_scale = quantize_rows_fp8(q)
    w = torch.randn((num_tokens, heads), generator=gen, device=device, dtype=torch.float32)
    weights = (w * heads**-0.5 * DIM**-0.5 * q_scale).contiguous()
    return q_fp8.contiguous(), weights


@dataclass
class Batch:
    """One target_verify batch as the DSA indexer sees it (per-token rows)."""

    next_n: int
    seq_lens: list[int]  # L per request: prefix + next_n draft tokens
    q_fp8: object  # [B*next_n, H, D] fp8
    weights: object  # [B*next_n, H] float32
    ctx_lens: object  # [B*next_n] int32: token j of request b sees L_b-next_n+1+j
    block_table: object  # [B*next_n, max_blocks] int32, row repeated per token
    max_context_len: int

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def kv_bytes(self) -> int:
        """Bytes of the KV pages the batch needs (each page once)."""
        return sum(math.ceil(n / PAGE) for n in self.seq_lens) * PAGE_BYTES


def make_batch(seq_lens, next_n, pages, device, gen, heads: int = HEADS) -> Batch:
    """Lay the requests over ``pages`` (a 1D tensor of physical page ids)."""
    import torch

    blocks = [math.ceil(n / PAGE) for n in seq_lens]
    max_blocks = max(blocks)
    assert pages.numel() >= sum(blocks)
    table = torch.zeros((len(seq_lens), max_blocks), dtype=torch.int32)
    offset = 0
    pages_cpu = pages.cpu()
    for b, nb in enumerate(blocks):
        table[b, :nb] = pages_cpu[offset : offset + nb]
        offset += nb
    ctx = torch.tensor(
        [n - next_n + 1 + j for n in seq_lens for j in range(next_n)],
        dtype=torch.int32,
    )
    q_fp8, weights = make_queries(len(seq_lens) * next_n, device, gen, heads)
    return Batch(
        next_n=next_n,
        seq_lens=list(seq_lens),
        q_fp8=q_fp8,
        weights=weights,
        ctx_lens=ctx.to(device),
        # dsa_backend repeats each request's row once per draft token.
        block_table=table.to(device).repeat_interleave(next_n, dim=0).contiguous(),
        max_context_len=max_blocks * PAGE,
    )


def attended_equal(batch, a, b) -> bool:
    """Whether logits ``a`` and ``b`` (per-token rows) agree bit for bit where each row attends."""
    import torch

    cols = torch.arange(a.shape[-1], device=a.device)
    mask = cols[None, :] < batch.ctx_lens[:, None]
    return bool(torch.equal(a[mask], b[mask]))


def layout_args(batch: Batch, layout: str):
    """(q, weights, context_lens, block_table) viewed as the patched indexer does."""
    t = tokens_per_row(layout, batch.next_n)
    n = batch.q_fp8.shape[0]
    q = batch.q_fp8.view(n // t, t, batch.q_fp8.shape[1], DIM)
    ctx = batch.ctx_lens.view(n // t, t)
    table = batch.block_table[:n:t]  # strided rows, no copy
    return q, batch.weights, ctx, table


def schedule_for(deep_gemm, context_lens):
    """DeepGEMM's schedule metadata for rows of ``context_lens`` (sglang makes it once per forward)."""
    ctas, slots = kv_multicast().get(context_lens.shape[1], (1, None))
    return deep_gemm.get_paged_mqa_logits_metadata(context_lens, PAGE, slots or deep_gemm.get_num_sms() // ctas)


def kv_multicast() -> dict[int, tuple[int, int | None]]:
    """CTAs per cluster and schedule slots by tokens per row, from PAGED_MQA_KV_MULTICAST ("4:2": rows of 4 tokens
    run as clusters of two CTAs, one slot per cluster of the SM count's; "5:3@39": clusters of three, 39 slots).
    DeepGEMM's nv_dev runs SM90 next_n 4 so (#314), its callers dividing the SM count. Where fewer clusters fit
    at once than that (the H200 holds 39 clusters of three of its 132 SMs, not 44: `max_active_clusters.cu`), the
    rest would run in a second wave, so a build that takes any slot count is given what fits. Unset, one slot
    per SM, as the pinned DeepGEMM takes it."""
    spec = os.environ.get("PAGED_MQA_KV_MULTICAST", "")
    out: dict[int, tuple[int, int | None]] = {}
    for pair in spec.split():
        tokens, _, cluster = pair.partition(":")
        ctas, _, slots = cluster.partition("@")
        out[int(tokens)] = (int(ctas), int(slots) if slots else None)
    return out


def layout_schedule(deep_gemm, batch: Batch, layout: str):
    """The schedule of ``batch`` in ``layout``."""
    _, _, ctx, _ = layout_args(batch, layout)
    return schedule_for(deep_gemm, ctx)


def run_layout(deep_gemm, kv_pool, batch: Batch, layout: str, schedule=None):
    """Per-token-shaped logits [B*next_n, max_context_len] for ``layout``."""
    q, weights, ctx, table = layout_args(batch, layout)
    if schedule is None:
        schedule = layout_schedule(deep_gemm, batch, layout)
    logits = deep_gemm.fp8_paged_mqa_logits(
        q,
        kv_pool,
        weights,
        ctx,
        table,
        schedule,
        batch.max_context_len,
        clean_logits=False,
    )
    return logits.view(q.shape[0] * q.shape[1], logits.shape[-1])


# ---------------------------------------------------------------- timing


def captured(fn, batches: list[Batch]):
    """A CUDA graph of one ``fn`` call per batch, each called once before (warm-up, JIT), replayed once."""
    import torch

    for b in batches:
        fn(b)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for b in batches:
            fn(b)
    graph.replay()
    torch.cuda.synchronize()
    return graph


def time_calls(fn, batches: list[Batch], reps: int) -> float:
    """Median microseconds per call of ``fn``: a CUDA graph of one call per batch (rotation), replayed
    ``reps`` times; each batch is called once before the capture (warm-up, JIT)."""
    import torch

    graph = captured(fn, batches)
    samples = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / len(batches))
    del graph
    return statistics.median(samples)


def time_layout(deep_gemm, kv_pool, batches: list[Batch], layout: str, reps: int):
    """Median microseconds per kernel call over CUDA-graph replays; the schedules are made outside the graph."""
    schedules = {id(b): layout_schedule(deep_gemm, b, layout) for b in batches}
    return time_calls(lambda b: run_layout(deep_gemm, kv_pool, b, layout, schedules[id(b)]), batches, reps)


def plan_pool(configs, args, l2_bytes: int) -> tuple[dict, int]:
    """Rotations per (next_n, B, ctx, lengths) case, enough that their KV is three times the L2 (within
    --min-calls and --max-calls), and the pool pages the largest case needs."""
    plans, max_pages = {}, 0
    for case in configs:
        b, c = case[1], case[2]
        set_pages = b * math.ceil(c / PAGE)
        rotations = max(args.min_calls, min(args.max_calls, math.ceil(3 * l2_bytes / (set_pages * PAGE_BYTES))))
        plans[case] = rotations
        max_pages = max(max_pages, set_pages * rotations)
    return plans, max_pages


def make_batches(
    case, plans: dict, max_pages: int, rng, gen, device, heads: int = HEADS, pages: str = "random"
) -> list[Batch]:
    """The rotations of one case, each over its own pages of the pool: a random permutation of it (``pages``
    "random"), or in order ("contiguous": each request's pages one run, as an allocator that filled an empty pool
    leaves them). Lengths: uniform, every request at ctx; ragged, uniform in [ctx/2, ctx]."""
    import torch

    n, b, c, d = case[:4]
    if pages == "contiguous":
        perm = torch.arange(max_pages, device=device)
    else:
        perm = torch.randperm(max_pages, device=device, generator=gen)
    set_pages = b * math.ceil(c / PAGE)
    lens = [c] * b if d == "uniform" else [rng.randint(c // 2, c) for _ in range(b)]
    return [
        make_batch(lens, n, perm[r * set_pages : (r + 1) * set_pages], device, gen, heads) for r in range(plans[case])
    ]


def case_fields(case, batches: list[Batch]) -> dict:
    """The fields a row of a kernel grid starts with: its case and how many rotations one graph ran."""
    n, b, c, d = case
    return {"next_n": n, "batch_size": b, "ctx": c, "lengths": d, "calls_per_graph": len(batches)}


def result_name(stem: str, result: dict) -> str:
    """STEM_h200, STEM_h100, or STEM_gpu for another card: a result file names the card its run recorded. A
    call that asks for an H200 may be given an H100 (5 Dec 2026), and a file named for the wrong card is a
    wrong row (the shell runners' twin: card_tag in ci/gpu_box.sh)."""
    device = result.get("device", "")
    return f"{stem}_{next((chip.lower() for chip in ('H200', 'H100') if chip in device), 'gpu')}"


def run_facts(device, num_sms: int, reps: int, **versions) -> dict:
    """What a GPU run's JSON says about where it ran, before its rows."""
    import torch

    return {
        "device": torch.cuda.get_device_name(device),
        "sm": "{}.{}".format(*torch.cuda.get_device_capability(device)),
        "num_sms": num_sms,
        "torch": torch.__version__,
        **versions,
        "deep_gemm": _dist_version("sgl-deep-gemm"),
        "heads": HEADS,
        "head_dim": DIM,
        "page": PAGE,
        "reps": reps,
    }


def run_bench(args) -> dict:
    import deep_gemm
    import torch

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    l2_bytes = getattr(props, "L2_cache_size", 60 << 20)
    gen = torch.Generator(device=device).manual_seed(1234)

    configs = [(n, b, c, d) for d in args.lengths for n in args.next_n for b in args.batch_sizes for c in args.ctx]
    plans, max_pages = plan_pool(configs, args, l2_bytes)
    print(f"KV pool: {max_pages} pages, {max_pages * PAGE_BYTES / 2**30:.2f} GiB")
    kv_pool = make_kv_pool(max_pages, device)

    rows = []
    rng = random.Random(99)
    for n, b, c, d in configs:
        batches = make_batches((n, b, c, d), plans, max_pages, rng, gen, device)
        candidate = "native" if n == 2 else "paired"
        t_tok = time_layout(deep_gemm, kv_pool, batches, "per_token", args.reps)
        t_multi = time_layout(deep_gemm, kv_pool, batches, candidate, args.reps)
        kv = batches[0].kv_bytes()
        rows.append(
            {
                **case_fields((n, b, c, d), batches),
                "kv_bytes": kv,
                "per_token_us": t_tok,
                f"{candidate}_us": t_multi,
                "multi_layout": candidate,
                "multi_us": t_multi,
            }
        )
        print(
            f"{d:7s} next_n={n} B={b:4d} ctx={c:6d}: per-token {t_tok:8.1f} us, "
            f"{candidate} {t_multi:8.1f} us, x{t_tok / t_multi:.2f}",
            flush=True,
        )
        del batches
        torch.cuda.empty_cache()

    return {**run_facts(device, deep_gemm.get_num_sms(), args.reps), "rows": rows}


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001  (not installed as a distribution)
        return None


# ---------------------------------------------------------------- report


def annotate(result: dict, min_bs: int) -> dict:
    """Add the chosen layout, its time, the ratio and bandwidths for min_bs."""
    result["min_batch_size"] = min_bs
    for row in result["rows"]:
        layout = chosen_layout(row["next_n"], row["batch_size"], min_bs)
        t_chosen = row["per_token_us"] if layout == "per_token" else row["multi_us"]
        reads = row["next_n"] // tokens_per_row(layout, row["next_n"])
        row["chosen_layout"] = layout
        row["chosen_us"] = t_chosen
        row["speedup"] = row["per_token_us"] / t_chosen
        row["multi_speedup"] = row["per_token_us"] / row["multi_us"]
        # KV bytes the request needs, over the time (each page counted once).
        row["chosen_kv_TBps"] = row["kv_bytes"] / (t_chosen * 1e-6) / 1e12
        row["per_token_kv_TBps"] = row["kv_bytes"] / (row["per_token_us"] * 1e-6) / 1e12
        # KV bytes the chosen layout streams (each q row reads its request's KV).
        row["chosen_kv_streamed_TBps"] = row["chosen_kv_TBps"] * reads
    return result


def table(result: dict) -> str:
    lines = [
        (
            "| lengths | next_n | B | ctx | per-token us | chosen | chosen us | speedup | "
            "native/paired us (always) | KV TB/s (chosen, unique) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r.get('lengths', 'uniform')} | {r['next_n']} | {r['batch_size']} "
            f"| {r['ctx'] // 1024}k "
            f"| {r['per_token_us']:.1f} | {r['chosen_layout']} | {r['chosen_us']:.1f} "
            f"| {r['speedup']:.2f}x | {r['multi_layout']} {r['multi_us']:.1f} "
            f"({r['multi_speedup']:.2f}x) | {r['chosen_kv_TBps']:.2f} |"
        )
    return "\n".join(lines)


def speedup_panels(rows: list[dict]):
    """A figure of speedup-over-batch-size panels, one per (lengths, next_n) of ``rows`` (lengths down,
    next_n across): the figure and, per panel, (axes, lengths, next_n, {ctx: its rows by batch size})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    next_ns = sorted({r["next_n"] for r in rows})
    dists = sorted({r.get("lengths", "uniform") for r in rows}, reverse=True)
    fig, axes = plt.subplots(len(dists), len(next_ns), figsize=(6 * len(next_ns), 4.5 * len(dists)), squeeze=False)
    panels = []
    for ax, (d, n) in zip(axes.flat, [(d, n) for d in dists for n in next_ns], strict=True):
        mine = [r for r in rows if r["next_n"] == n and r.get("lengths", "uniform") == d]
        by_ctx = {
            c: sorted((r for r in mine if r["ctx"] == c), key=lambda r: r["batch_size"])
            for c in sorted({r["ctx"] for r in mine})
        }
        panels.append((ax, d, n, by_ctx))
    return fig, panels


def finish_panel(ax, ylabel: str, title: str, **title_style) -> None:
    """The parity line, the 0.95 floor, log2 batch sizes, labels, legend and grid."""
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(0.95, color="red", linewidth=0.6, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size B (requests)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, **title_style)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)


def plot(result: dict, path: str) -> None:
    fig, panels = speedup_panels(result["rows"])
    for ax, d, n, by_ctx in panels:
        for c, sel in by_ctx.items():
            xs = [r["batch_size"] for r in sel]
            (line,) = ax.plot(xs, [r["speedup"] for r in sel], marker="o", label=f"chosen, {c // 1024}k")
            ax.plot(
                xs,
                [r["multi_speedup"] for r in sel],
                linestyle="--",
                color=line.get_color(),
                alpha=0.6,
                label=f"{sel[0]['multi_layout']} always, {c // 1024}k",
            )
        finish_panel(ax, "speedup over per-token", f"next_n={n}, {d} lengths: fp8_paged_mqa_logits, {result['device']}")
        ax.axvline(result["min_batch_size"], color="black", linewidth=0.6, linestyle=":")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_grid_arguments(parser, next_n: list[int]) -> None:
    """The kernel grid's options (bench/studies/sm90_single_read.py takes them too): output folder, the cases, timing."""
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--next-n", type=int, nargs="+", default=next_n)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--ctx", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--lengths", nargs="+", default=["uniform", "ragged"], choices=["uniform", "ragged"])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--min-calls", type=int, default=4)
    parser.add_argument("--max-calls", type=int, default=128)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_grid_arguments(parser, next_n=[2, 4])
    parser.add_argument("--min-bs", type=int, default=DEFAULT_MIN_BS)
    parser.add_argument("--rerender", help="json from an earlier run: no GPU work")
    args = parser.parse_args(argv)

    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    if args.rerender:
        with open(args.rerender) as f:
            result = json.load(f)
        result.setdefault("commands", {})["rerender"] = command
    else:
        started = time.time()
        result = run_bench(args)
        result["commands"] = {"bench": command}
        if os.environ.get("BENCH_DEVICE_COMMAND"):
            result["commands"]["device"] = os.environ["BENCH_DEVICE_COMMAND"]
        result["wall_s"] = round(time.time() - started, 1)
    annotate(result, args.min_bs)
    os.makedirs(args.out, exist_ok=True)
    name = result_name("paged_mqa", result)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    print(table(result))
    try:
        plot(result, os.path.join(args.out, name + ".png"))
    except ImportError as exc:
        print(f"no plot: {exc}")


if __name__ == "__main__":
    main()
