"""Single-read paged MQA logits for next_n 3 and 4 on SM90, side by side with DeepGEMM (issue 17).

For each (next_n, B, ctx, lengths) this times, in one process and on the same inputs:

- ``per_token``: DeepGEMM ``fp8_paged_mqa_logits`` with one token per row (sglang v0.5.14's SM90 path;
  the KV of a request is read next_n times);
- ``paired`` (next_n = 4): DeepGEMM with ``[B*next_n/2, 2]`` rows (the series' patch 2; each page twice);
- ``single``: the Triton kernel of ``bench/studies/single_read_kernel.py`` (``_single_read_kernel``), which reads
  each page once for all next_n tokens of its request.

``current`` is today's choice of the series' SM90 rule: per-token for next_n = 3, paired for next_n = 4
at B >= 8 (per-token below).  ``speedup_vs_current`` = current us / single us.

Timing as ``bench/paged_mqa.py``: a CUDA graph of several calls on rotated inputs (different pages, q,
weights, so the KV comes from HBM, not L2), replayed ``--reps`` times, median per call.

Correctness on every shape (first rotation): the single-read logits against DeepGEMM per-token on
every position a token attends to (max |diff| / max |ref|), and the top-k (k = min(2048, length)) of
each token row: ``topk_identical`` is true when the index sets are equal; where they differ, each
swapped index must be a near-tie (its logit within 1e-5 relative of the k-th value), counted in
``topk_near_tie_swaps``; any other difference fails the run.

``--sweep`` times several kernel configurations on a few shapes instead (for choosing the rule).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import paged_mqa as pm  # noqa: E402
from bench.studies import single_read_kernel as sk  # noqa: E402

TOPK = 2048
NEAR_TIE_REL = 1e-5


def current_layout(next_n: int, batch_size: int) -> str:
    """Today's SM90 rule (patch 1/2): per-token for odd next_n, paired for even next_n >= 4 at B >= 8."""
    if next_n >= 4 and next_n % 2 == 0 and batch_size >= pm.DEFAULT_MIN_BS:
        return "paired"
    return "per_token"


def kernel_config(next_n: int, batch_size: int, max_pages: int, chosen: dict | None = None) -> dict:
    """The launch configuration used for the grid: per next_n from the sweep (``--config-json``)."""
    cfg = dict((chosen or {}).get(str(next_n), KERNEL_DEFAULT))
    cfg.pop("geomean_speedup", None)
    cfg["pages_per_prog"] = sk.pick_pages_per_prog(batch_size, max_pages)
    return cfg


KERNEL_DEFAULT = {"name": "split_tma_s3", "num_warps": 4, "num_stages": 3, "use_tma": True}


def _launch_args(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k != "name"}


def run_single(batch: pm.Batch, kv_pool, cfg: dict):
    q = batch.q_fp8.view(batch.batch_size, batch.next_n, pm.HEADS, pm.DIM)
    ctx = batch.ctx_lens.view(batch.batch_size, batch.next_n)
    table = batch.block_table[:: batch.next_n]
    return sk.single_read_logits(q, kv_pool, batch.weights, ctx, table, batch.max_context_len, **_launch_args(cfg))


def compare(batch: pm.Batch, ref, got) -> dict:
    """Logits on valid positions and per-row top-k, single-read (got) against DeepGEMM per-token (ref)."""
    import torch

    n_rows, width = ref.shape
    cols = torch.arange(width, device=ref.device)
    valid = cols[None, :] < batch.ctx_lens[:, None].long()
    r = ref[valid]
    g = got[valid]
    assert torch.isfinite(g).all(), "non-finite single-read logits on a valid position"
    max_rel = ((r - g).abs().max() / r.abs().max()).item()
    neg = torch.tensor(float("-inf"), device=ref.device)
    rm = torch.where(valid, ref, neg)
    gm = torch.where(valid, got, neg)
    identical = True
    near_ties = 0
    for row in range(n_rows):
        length = int(batch.ctx_lens[row])
        k = min(TOPK, length)
        ri = torch.topk(rm[row], k).indices
        gi = torch.topk(gm[row], k).indices
        rs = set(ri.tolist())
        gs = set(gi.tolist())
        if rs == gs:
            continue
        identical = False
        kth = rm[row][ri].min()
        tol = NEAR_TIE_REL * max(1.0, abs(kth.item()))
        swapped = list(rs ^ gs)
        vals = rm[row][torch.tensor(swapped, device=ref.device)]
        bad = (vals - kth).abs() > tol + (rm[row].abs().max() * 1e-6)
        if bad.any():
            raise AssertionError(f"row {row}: top-{k} differs beyond near-ties: {int(bad.sum())} of {len(swapped)}")
        near_ties += len(swapped) // 2
    return {"max_rel_diff": max_rel, "topk_identical": identical, "topk_near_tie_swaps": near_ties}


def run_bench(args) -> dict:
    import deep_gemm
    import torch
    import triton

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    l2_bytes = getattr(props, "L2_cache_size", 60 << 20)
    gen = torch.Generator(device=device).manual_seed(4321)
    rng = random.Random(17)
    configs = [(n, b, c, d) for d in args.lengths for n in args.next_n for b in args.batch_sizes for c in args.ctx]
    plans, max_pages = pm.plan_pool(configs, args, l2_bytes)
    print(f"KV pool: {max_pages} pages, {max_pages * pm.PAGE_BYTES / 2**30:.2f} GiB", flush=True)
    kv_pool = pm.make_kv_pool(max_pages, device)

    def dg(layout):
        return lambda batch: pm.run_layout(deep_gemm, kv_pool, batch, layout, sched[(id(batch), layout)])

    rows = []
    sweep_rows = []
    for n, b, c, d in configs:
        batches = pm.make_batches((n, b, c, d), plans, max_pages, rng, gen, device)
        sched = {}
        layouts = ["per_token"] + (["paired"] if n % 2 == 0 else [])
        for bt in batches:
            for lay in layouts:
                sched[(id(bt), lay)] = pm.layout_schedule(deep_gemm, bt, lay)
        times = {lay: pm.time_calls(dg(lay), batches, args.reps) for lay in layouts}
        kv = batches[0].kv_bytes()
        max_pages_req = math.ceil(batches[0].max_context_len / pm.PAGE)
        ref = pm.run_layout(deep_gemm, kv_pool, batches[0], "per_token", sched[(id(batches[0]), "per_token")])
        cur = current_layout(n, b)
        if args.sweep:
            for cfg in sweep_configs(n, b, max_pages_req):
                try:
                    t = pm.time_calls(lambda bt, cfg=cfg: run_single(bt, kv_pool, cfg), batches, args.reps)
                    chk = compare(batches[0], ref, run_single(batches[0], kv_pool, cfg))
                except Exception as exc:  # noqa: BLE001  a config that does not compile or fit
                    print(f"  config {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                    continue
                sweep_rows.append(
                    {
                        "next_n": n,
                        "batch_size": b,
                        "ctx": c,
                        "lengths": d,
                        "config": cfg,
                        "us": t,
                        "unique_kv_TBps": kv / (t * 1e-6) / 1e12,
                        "current_us": times[cur],
                        "speedup_vs_current": times[cur] / t,
                        **chk,
                    }
                )
                print(
                    f"{d:7s} n={n} B={b:4d} ctx={c:6d} {cfg}: {t:8.1f} us "
                    f"{kv / (t * 1e-6) / 1e12:5.2f} TB/s  x{times[cur] / t:.2f} vs {cur} "
                    f"rel {chk['max_rel_diff']:.1e} topk {chk['topk_identical']}",
                    flush=True,
                )
            del batches
            torch.cuda.empty_cache()
            continue
        cfg = kernel_config(n, b, max_pages_req, args.chosen)
        t_single = pm.time_calls(lambda bt: run_single(bt, kv_pool, cfg), batches, args.reps)
        chk = compare(batches[0], ref, run_single(batches[0], kv_pool, cfg))
        for lay, t in [("single", t_single)] + list(times.items()):
            rows.append(
                {
                    "next_n": n,
                    "batch_size": b,
                    "ctx": c,
                    "lengths": d,
                    "layout": lay,
                    "function": (
                        "bench.studies.single_read_kernel._single_read_kernel (Triton)"
                        if lay == "single"
                        else f"deep_gemm.fp8_paged_mqa_logits ({lay})"
                    ),
                    "us": t,
                    "unique_kv_TBps": kv / (t * 1e-6) / 1e12,
                    "current_layout": cur,
                    "speedup_vs_current": times[cur] / t,
                    "topk_identical": chk["topk_identical"] if lay == "single" else True,
                    **({"config": cfg, **chk} if lay == "single" else {}),
                    "kv_bytes": kv,
                    "calls_per_graph": len(batches),
                }
            )
        print(
            f"{d:7s} n={n} B={b:4d} ctx={c:6d}: single {t_single:8.1f} us "
            f"({kv / (t_single * 1e-6) / 1e12:4.2f} TB/s)  "
            + "  ".join(f"{lay} {t:8.1f}" for lay, t in times.items())
            + f"  x{times[cur] / t_single:.2f} vs {cur}  rel {chk['max_rel_diff']:.1e} "
            f"topk {'=' if chk['topk_identical'] else '~' + str(chk['topk_near_tie_swaps'])}",
            flush=True,
        )
        del batches
        torch.cuda.empty_cache()

    facts = pm.run_facts(device, props.multi_processor_count, args.reps, triton=triton.__version__)
    return {**facts, "rows": rows, **({"sweep": sweep_rows} if args.sweep else {})}


SWEEP = {
    "split_tma_s3": {"num_warps": 4, "num_stages": 3, "use_tma": True},
    "onestore_tma_s3": {"num_warps": 4, "num_stages": 3, "use_tma": True, "one_store": True},
    "onestore_tma_s4": {"num_warps": 4, "num_stages": 4, "use_tma": True, "one_store": True},
    "onestore_ptr_s3": {"num_warps": 4, "num_stages": 3, "use_tma": False, "one_store": True},
    "x2_w8_s3": {"num_warps": 8, "num_stages": 3, "x2": True},
    "x2_w8_s2": {"num_warps": 8, "num_stages": 2, "x2": True},
    "x2_w4_s3": {"num_warps": 4, "num_stages": 3, "x2": True},
}


def sweep_configs(n, b, max_pages):
    base = sk.pick_pages_per_prog(b, max_pages)
    return [{"name": name, **cfg, "pages_per_prog": base} for name, cfg in SWEEP.items()]


def pick_from_sweep(sweep_rows) -> dict:
    """Per next_n, the configuration with the best geometric-mean speedup over the swept shapes."""
    chosen = {}
    for n in sorted({r["next_n"] for r in sweep_rows}):
        score = {}
        for r in sweep_rows:
            if r["next_n"] == n:
                score.setdefault(r["config"]["name"], []).append(math.log(r["speedup_vs_current"]))
        shapes = max(len(v) for v in score.values())
        best = max((k for k, v in score.items() if len(v) == shapes), key=lambda k: sum(score[k]))
        chosen[str(n)] = {"name": best, **SWEEP[best], "geomean_speedup": math.exp(sum(score[best]) / shapes)}
    return chosen


def table(result: dict) -> str:
    lines = [
        "| lengths | next_n | B | ctx | single us | current | current us | speedup vs current | "
        "single TB/s (unique KV) | current TB/s | top-k identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {}
    for r in result["rows"]:
        by.setdefault((r["lengths"], r["next_n"], r["batch_size"], r["ctx"]), {})[r["layout"]] = r
    for (d, n, b, c), g in by.items():
        s = g["single"]
        cur = g[s["current_layout"]]
        topk = "yes" if s["topk_identical"] else "near-tie swaps: {}".format(s["topk_near_tie_swaps"])
        lines.append(
            f"| {d} | {n} | {b} | {c // 1024}k | {s['us']:.1f} | {s['current_layout']} | {cur['us']:.1f} "
            f"| {s['speedup_vs_current']:.2f}x | {s['unique_kv_TBps']:.2f} | {cur['unique_kv_TBps']:.2f} "
            f"| {topk} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    fig, panels = pm.speedup_panels([r for r in result["rows"] if r["layout"] == "single"])
    for ax, d, n, by_ctx in panels:
        for c, sel in by_ctx.items():
            ax.plot(
                [r["batch_size"] for r in sel],
                [r["speedup_vs_current"] for r in sel],
                marker="o",
                label=f"{c // 1024}k",
            )
        title = f"next_n={n}, {d}: Triton single read vs DeepGEMM {result.get('deep_gemm')}"
        pm.finish_panel(ax, "single-read speedup vs current layout", title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def profile(args) -> None:
    """One launch each of the single-read kernel and DeepGEMM (per-token, paired) on one shape."""
    import deep_gemm
    import torch

    n, b, c = args.next_n[0], args.batch_sizes[0], args.ctx[0]
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(5)
    rng = random.Random(5)
    pages = b * math.ceil(c / pm.PAGE)
    kv_pool = pm.make_kv_pool(pages, device)
    lens = [rng.randint(c // 2, c) for _ in range(b)]
    batch = pm.make_batch(lens, n, torch.arange(pages, device=device), device, gen)
    cfg = kernel_config(n, b, math.ceil(batch.max_context_len / pm.PAGE), args.chosen)
    print("profile config", cfg, flush=True)
    run_single(batch, kv_pool, cfg)
    for lay in ["per_token"] + (["paired"] if n % 2 == 0 else []):
        pm.run_layout(deep_gemm, kv_pool, batch, lay)
    torch.cuda.synchronize()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pm.add_grid_arguments(parser, next_n=[3, 4])
    parser.add_argument("--sweep", action="store_true", help="time several kernel configurations instead")
    parser.add_argument("--name", help="the files' stem (default sm90_single_read_ and the run's card)")
    parser.add_argument("--config-json", help="kernel configuration per next_n (written by --sweep)")
    parser.add_argument("--profile", action="store_true", help="one shape, a few launches of each kernel (for ncu)")
    parser.add_argument("--rerender", help="json from an earlier run: table and plot only, no GPU")
    args = parser.parse_args(argv)
    args.chosen = None
    if args.config_json:
        with open(args.config_json) as f:
            args.chosen = json.load(f)
    command = "python " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv))
    if args.profile:
        profile(args)
        return
    if args.rerender:
        with open(args.rerender) as f:
            result = json.load(f)
        name = args.name or pm.result_name("sm90_single_read", result)
    else:
        started = time.time()
        result = run_bench(args)
        name = args.name or pm.result_name("sm90_single_read", result)
        result["command"] = command
        result["wall_s"] = round(time.time() - started, 1)
        os.makedirs(args.out, exist_ok=True)
        if args.sweep:
            result["chosen"] = pick_from_sweep(result["sweep"])
            with open(os.path.join(args.out, name + "_config.json"), "w") as f:
                json.dump(result["chosen"], f, indent=1)
            print("chosen:", json.dumps(result["chosen"]))
        elif args.chosen:
            result["kernel_configs"] = args.chosen
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(result, f, indent=1)
    os.makedirs(args.out, exist_ok=True)
    if result["rows"]:
        print(table(result))
        try:
            plot(result, os.path.join(args.out, name + ".png"))
        except ImportError as exc:
            print(f"no plot: {exc}")


if __name__ == "__main__":
    main()
