#!/usr/bin/env python3
"""Plot and tabulate bench/indexer_step.py results (the JSON its --json writes).

    python bench/plot_indexer.py docs/results/indexer_h200.json --png docs/results/indexer_h200.png

Prints markdown: per next_n the speedup range of the CUDA-graph rows, the full CUDA-graph
table, and every row whose top-k was not identical with the evidence.  The PNG shows the
speedup of the chosen layout over per-token (whole indexer step: logits + top-k transform,
CUDA graph) against batch size, one panel per next_n, one line per context and lengths.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def summary(doc):
    out = []
    graph = [r for r in doc["rows"] if r["cuda_graph"]]
    out.append("| next_n | layouts chosen (CUDA graph) | speedup min | speedup max | B >= 32, 64k: min-max |")
    out.append("|---|---|---|---|---|")
    for n in sorted({r["next_n"] for r in graph}):
        rs = [r for r in graph if r["next_n"] == n]
        sp = [r["speedup"] for r in rs]
        big = [r["speedup"] for r in rs if r["batch_size"] >= 32 and r["ctx"] == 65536]
        layouts = ", ".join(sorted({r["layout"] for r in rs}))
        big_s = f"{min(big):.2f}-{max(big):.2f}x" if big else "-"
        out.append(f"| {n} | {layouts} | {min(sp):.3f}x | {max(sp):.3f}x | {big_s} |")
    out.append("")
    out.append("| next_n | B | ctx | lengths | layout | per-token us | chosen us | speedup |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in graph:
        out.append(
            f"| {r['next_n']} | {r['batch_size']} | {r['ctx']} | {r['lengths']} | {r['layout']} | "
            f"{r['per_token_us']} | {r['chosen_us']} | {r['speedup']:.3f}x |"
        )
    out.append("")
    odd = [r for r in doc["rows"] if not r["topk_identical"] or any(r["tie_rows"].values())]
    ident = sum(r["topk_identical"] for r in doc["rows"])
    out.append(f"top-k identical (sets; ties allowed) in {ident} of {len(doc['rows'])} rows")
    for r in odd:
        mode = "graph" if r["cuda_graph"] else "eager"
        out.append(
            f"- next_n {r['next_n']}, B {r['batch_size']}, ctx {r['ctx']}, {r['lengths']}, {mode}: "
            f"ties {r['tie_rows']}, explained by the top-k kernel {r['explained_rows']}, "
            f"unexplained {r['mismatch_rows']}, per-token rerun differs in {r['per_token_rerun_diff_rows']} rows, "
            f"logits bit-identical: {r['logits_bit_identical']}"
        )
    return "\n".join(out)


def plot(doc, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graph = [r for r in doc["rows"] if r["cuda_graph"]]
    next_ns = sorted({r["next_n"] for r in graph})
    fig, axes = plt.subplots(1, len(next_ns), figsize=(5 * len(next_ns), 4.2), sharey=True)
    if len(next_ns) == 1:
        axes = [axes]
    series = defaultdict(list)
    for r in graph:
        series[(r["next_n"], r["ctx"], r["lengths"])].append((r["batch_size"], r["speedup"], r["layout"]))
    colors = {4096: "tab:blue", 16384: "tab:orange", 65536: "tab:red"}
    for ax, n in zip(axes, next_ns, strict=True):
        for (nn, ctx, kind), pts in sorted(series.items()):
            if nn != n:
                continue
            pts.sort()
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(
                xs,
                ys,
                marker="o" if kind == "ragged" else "s",
                linestyle="-" if kind == "ragged" else "--",
                color=colors.get(ctx, "gray"),
                label=f"{ctx // 1024}k {kind}",
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 4, 8, 32, 64, 128])
        ax.set_xticklabels(["1", "4", "8", "32", "64", "128"])
        ax.set_xlabel("batch size (requests)")
        layouts = sorted({r["layout"] for r in graph if r["next_n"] == n})
        ax.set_title(f"next_n = {n} (chosen: {', '.join(layouts)})")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("per-token time / chosen-layout time")
    axes[-1].legend(fontsize=8)
    fig.suptitle(
        f"DSA indexer step per TARGET_VERIFY forward (DeepGEMM logits + fused top-k, CUDA graph), "
        f"{doc['device']}, sglang 0.5.14 + series",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--png")
    args = ap.parse_args(argv)
    with open(args.json) as fh:
        doc = json.load(fh)
    print(summary(doc))
    if args.png:
        plot(doc, args.png)
        print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
