"""What a two-call split could gain for odd next_n on SM90 (issue 23): DeepGEMM's kernel alone.

SM90 DeepGEMM takes one or two query tokens per paged-MQA row, so next_n 3 and 5 run one token per
row in both series lines (docs/sm90-odd-next-n.md). The design not tried yet, timed here: per
request, tokens 0..n-2 go to DeepGEMM as two-token rows in one call and the last token goes in a
second, one-token call, so each request's KV is read (n + 1) / 2 times instead of n.

What it times, per case, in one CUDA graph of several rotations (bench/paged_mqa.py's timing):
- per-token: one ``fp8_paged_mqa_logits`` call over ``[B * n, 1]`` rows, as sglang runs odd next_n;
- split: the copies a layer would make (q and head weights of the pairs and of the tails, which are
  not contiguous in sglang's request-major order) and the two ``fp8_paged_mqa_logits`` calls. The
  context lengths, block-table rows and both schedules are built outside the graph, as sglang's
  metadata is, once per forward.
The top-k is not in it: both layouts give the same rows to a top-k, but the split gives them in
two logits buffers, so a top-k over them costs a second launch (or a merge) that this leaves out.
No sglang code runs here; it is a measurement of the design, not of a patch.

Checked in every case: the split's logits equal per-token's, bit for bit, on every attended
position (``logits_identical``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for `bench`

from bench.paged_mqa import (  # noqa: E402
    DIM,
    HEADS,
    add_grid_arguments,
    attended_equal,
    case_fields,
    finish_panel,
    make_batches,
    make_kv_pool,
    plan_pool,
    result_name,
    run_facts,
    schedule_for,
    speedup_panels,
    time_calls,
    time_layout,
)


def split_rows(batch):
    """The split's per-forward pieces: (pairs, tail), each (context lengths, block-table rows), from the
    per-token batch (block-table rows repeated once per token, request-major)."""
    n, b = batch.next_n, batch.batch_size
    assert n % 2 == 1 and n >= 3, "the split is for odd next_n >= 3"
    ctx = batch.ctx_lens.view(b, n)
    table = batch.block_table.view(b, n, -1)
    pairs = (
        ctx[:, : n - 1].reshape(-1, 2).contiguous(),
        table[:, 0 : n - 1 : 2].reshape(b * (n - 1) // 2, -1).contiguous(),
    )
    tail = (ctx[:, n - 1 :].contiguous(), table[:, n - 1].contiguous())
    return pairs, tail


def split_queries(batch):
    """The per-layer copies: (q, weights) of the pairs ``[B * (n-1) / 2, 2, H, D]`` and of the tails
    ``[B, 1, H, D]``."""
    n, b = batch.next_n, batch.batch_size
    q = batch.q_fp8.view(b, n, HEADS, DIM)
    w = batch.weights.view(b, n, HEADS)
    pairs = (q[:, : n - 1].reshape(-1, 2, HEADS, DIM).contiguous(), w[:, : n - 1].reshape(-1, HEADS).contiguous())
    tail = (q[:, n - 1 :].contiguous(), w[:, n - 1].contiguous())
    return pairs, tail


def split_to_token_order(batch, pair_logits, tail_logits):
    """Both calls' logits as per-token rows ``[B * n, max_context_len]`` (for the check only)."""
    import torch

    n, b = batch.next_n, batch.batch_size
    width = pair_logits.shape[-1]
    return torch.cat([pair_logits.view(b, n - 1, width), tail_logits.view(b, 1, width)], dim=1).view(b * n, width)


class Split:
    """One batch's split: the metadata made once (lengths, rows, schedules), and the per-layer call."""

    def __init__(self, deep_gemm, kv_pool, batch):
        self.dg, self.kv, self.batch = deep_gemm, kv_pool, batch
        self.pairs, self.tail = split_rows(batch)
        self.schedules = [schedule_for(deep_gemm, ctx) for ctx, _ in (self.pairs, self.tail)]

    def __call__(self):
        out = []
        for (q, w), (ctx, table), schedule in zip(
            split_queries(self.batch), (self.pairs, self.tail), self.schedules, strict=True
        ):
            out.append(
                self.dg.fp8_paged_mqa_logits(
                    q, self.kv, w, ctx, table, schedule, self.batch.max_context_len, clean_logits=False
                )
            )
        return out


def run_bench(args) -> dict:
    import deep_gemm
    import torch

    from bench.paged_mqa import run_layout

    device = torch.device("cuda")
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20)
    gen = torch.Generator(device=device).manual_seed(4321)
    configs = [(n, b, c, d) for d in args.lengths for n in args.next_n for b in args.batch_sizes for c in args.ctx]
    plans, max_pages = plan_pool(configs, args, l2_bytes)
    print(f"KV pool: {max_pages} pages", flush=True)
    kv_pool = make_kv_pool(max_pages, device)
    rows, rng = [], random.Random(7)
    for case in configs:
        n, b, c, d = case
        batches = make_batches(case, plans, max_pages, rng, gen, device)
        splits = {id(x): Split(deep_gemm, kv_pool, x) for x in batches}
        first = batches[0]
        identical = attended_equal(
            first, run_layout(deep_gemm, kv_pool, first, "per_token"), split_to_token_order(first, *splits[id(first)]())
        )
        t_tok = time_layout(deep_gemm, kv_pool, batches, "per_token", args.reps)
        t_split = time_calls(lambda x, by_batch=splits: by_batch[id(x)](), batches, args.reps)
        rows.append(
            {
                **case_fields(case, batches),
                "per_token_us": t_tok,
                "split_us": t_split,
                "split_speedup": t_tok / t_split,
                "logits_identical": identical,
            }
        )
        print(
            f"{d:7s} next_n={n} B={b:4d} ctx={c:6d}: per-token {t_tok:8.1f} us, split {t_split:8.1f} us, "
            f"x{t_tok / t_split:.3f}, logits identical {identical}",
            flush=True,
        )
        del batches, splits
        torch.cuda.empty_cache()
    return {**run_facts(device, deep_gemm.get_num_sms(), args.reps), "rows": rows}


def plot(result: dict, path: str) -> None:
    """Split over per-token against the batch size, one panel per (lengths, next_n), a line per context."""
    fig, panels = speedup_panels(result["rows"])
    for ax, lengths, next_n, by_ctx in panels:
        for ctx, rows in by_ctx.items():
            ax.plot(
                [r["batch_size"] for r in rows], [r["split_speedup"] for r in rows], marker="o", label=f"{ctx // 1024}k"
            )
        ax.axhline(1.25 if next_n == 3 else 1.2, color="green", linewidth=0.6, linestyle="--")
        finish_panel(
            ax, "per-token us / split us", f"next_n={next_n}, {lengths}: two DeepGEMM calls, {result['device']}"
        )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_grid_arguments(ap, next_n=[3, 5])
    ap.set_defaults(batch_sizes=[8, 32, 64, 128], reps=25, max_calls=64)  # the committed H200 run's grid
    ap.add_argument("--rerender", help="a JSON this wrote earlier: draw its picture into --out, no GPU work")
    args = ap.parse_args(argv)
    if args.rerender:
        result = json.loads(Path(args.rerender).read_text())
        plot(result, os.path.join(args.out, result_name("odd_split", result) + ".png"))
        return 0
    started = time.time()
    result = run_bench(args)
    result["command"] = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    result["wall_s"] = round(time.time() - started, 1)
    os.makedirs(args.out, exist_ok=True)
    name = result_name("odd_split", result)
    Path(args.out, name + ".json").write_text(json.dumps(result, indent=1) + "\n")
    try:
        plot(result, os.path.join(args.out, name + ".png"))
    except ImportError as exc:
        print(f"no plot: {exc}")
    return 0 if all(r["logits_identical"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
