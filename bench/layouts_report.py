#!/usr/bin/env python3
"""What a run of ci/run_gpu_layouts.sh showed, against the criteria of issues 22 and 23.

Reads the patched runs' JSONs (bench/indexer_step.py, grids holdout and odd, CUDA graphs) and the
parts' exit statuses, and checks, per series line:

- hold-out (issue 22): wherever the SM90 rule took two tokens per row, at least 0.97x of forced
  per-token; no row's top-k differs from per-token's beyond the counted ties, and the logits are
  bit-identical on every attended position;
- odd next_n: one token per row on every row (the series carries no odd-next_n path: pairs plus a
  tail, measured on the H200, was slower than per-token in many cases; docs/sm90-odd-next-n.md);
- the comparison's own self-check caught a perturbed top-k row;
- identity: the cases a pristine tree ran too have its top-k.

    python bench/layouts_report.py RUN.json [RUN.json ...] [--parts parts.tsv] [--summary OUT.json]

Prints a short summary; --summary writes it as JSON. Exit 0 when every criterion that had rows
held, 1 otherwise (a criterion without rows is reported as "no rows", not as a pass).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

FLOOR = 0.97


def _graph_rows(doc, grid):
    return [r for r in doc.get("rows", []) if r.get("cuda_graph") and grid in r.get("grids", [doc.get("grid")])]


def _two_per_row(rows):
    return [r for r in rows if r["layout"] != "per_token" and r.get("speedup") is not None]


def _where(r):
    return f"n={r['next_n']} B={r['batch_size']} ctx={r['ctx']} {r['lengths']} {r['layout']} {r['speedup']}x"


def _check(name, rows, ok, detail):
    status = "no rows" if not rows else ("pass" if ok else "FAIL")
    return dict(criterion=name, status=status, rows=len(rows), detail=detail)


def line_report(doc):
    """The criteria for one patched run."""
    checks = []
    hold = _graph_rows(doc, "holdout")
    chosen = _two_per_row(hold)
    low = [r for r in chosen if r["speedup"] < FLOOR]
    speeds = [r["speedup"] for r in chosen]
    checks.append(
        _check(
            "holdout: two tokens per row never below 0.97x of per-token",
            chosen,
            not low,
            (
                f"{len(chosen)} of {len(hold)} rows took two tokens per row; speedup min "
                f"{min(speeds, default=0):.3f}, median {statistics.median(speeds) if speeds else 0:.3f}; "
                f"below 0.97x: {[_where(r) for r in low[:5]]}"
            ),
        )
    )
    measured = [r for r in doc.get("rows", []) if r.get("cuda_graph")]
    bad_topk = [r for r in measured if not r.get("topk_equivalent")]
    checks.append(
        _check(
            "top-k: every row equal to per-token's (ties counted)",
            measured,
            not bad_topk,
            f"identical {sum(bool(r.get('topk_identical')) for r in measured)}, mismatching "
            f"{len(bad_topk)}: {[_where(r) for r in bad_topk[:5]]}",
        )
    )
    multi = [r for r in measured if r["layout"] != "per_token"]
    bad_logits = [r for r in multi if r.get("logits_bit_identical") is not True]
    checks.append(
        _check(
            "logits: bit-identical to per-token on every attended position",
            multi,
            not bad_logits,
            f"{len(multi) - len(bad_logits)} of {len(multi)} two-token rows; differing: "
            f"{[_where(r) for r in bad_logits[:5]]}",
        )
    )
    odd = [r for r in measured if r["next_n"] % 2]
    odd_multi = [r for r in odd if r["layout"] != "per_token"]
    checks.append(
        _check(
            "odd next_n: one token per row",
            odd,
            not odd_multi,
            f"{len(odd)} rows; not per-token: {[_where(r) for r in odd_multi[:5]]}",
        )
    )
    self_check = doc.get("comparison_self_check") or {}
    checks.append(
        _check(
            "self-check: the top-k comparison caught a perturbed row",
            [self_check] if self_check else [],
            bool(self_check.get("detected")),
            self_check.get("reason") or f"mismatch rows {self_check.get('result', {}).get('mismatch_rows')}",
        )
    )
    pristine = [r for r in measured if "pristine" in r.get("compared_with", [])]
    bad = [r for r in pristine if r.get("mismatch_rows", {}).get("pristine")]
    checks.append(
        _check(
            "identity: per-token top-k equal to the pristine tree's",
            pristine,
            not bad,
            f"{len(pristine)} cases compared; mismatching: {[_where(r) for r in bad[:5]]}",
        )
    )
    return dict(
        sglang=doc.get("sglang"),
        device=doc.get("device"),
        deep_gemm=doc.get("deep_gemm"),
        sgl_kernel=doc.get("sgl_kernel"),
        torch=doc.get("torch"),
        partial=doc.get("partial"),
        rows=len(doc.get("rows", [])),
        checks=checks,
    )


def read_parts(path):
    parts = []
    for line in Path(path).read_text().splitlines():
        name, rc, wall = line.split("\t")[:3]
        parts.append(dict(part=name, exit_status=rc, wall_s=float(wall)))
    return parts


LAYOUT_MARKS = {  # layout -> (marker, filled, legend)
    "native": ("o", True, "native [B, 2]"),
    "paired": ("s", True, "paired"),
    "pair_tail": ("x", True, "pairs plus a tail (taken out since)"),
    "per_token": ("o", False, "per-token chosen (same step twice)"),
}


def plot(docs: list[tuple[str, dict]], path: Path) -> None:
    """Per line, each CUDA-graph row's chosen / forced per-token time against the tokens of its batch, coloured
    by next_n, marked by the layout the rule chose; the 0.97x floor as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(docs), figsize=(6.5 * len(docs), 4.8), sharey=True, squeeze=False)
    colours = dict(zip(range(2, 7), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"), strict=True))
    for ax, (name, doc) in zip(axes[0], docs, strict=True):
        rows = [r for r in doc["rows"] if r.get("cuda_graph") and r.get("speedup")]
        for r in rows:
            marker, filled, _ = LAYOUT_MARKS[r["layout"]]
            colour = colours.get(r["next_n"], "grey")
            paint = (
                dict(c=colour) if marker == "x" else dict(facecolors=colour if filled else "none", edgecolors=colour)
            )
            ax.scatter(r["batch_size"] * r["ctx"], r["speedup"], marker=marker, s=22, **paint)
        ax.axhline(FLOOR, color="black", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens in the batch (requests x context)")
        ax.set_title(f"{name}: sglang {doc.get('sglang', '?')}, {doc.get('device', '?')}", fontsize=9)
    axes[0][0].set_ylabel("per-token time / chosen time (CUDA graphs)")
    handles = [
        plt.Line2D([], [], ls="", marker=m, mfc="grey" if f else "none", mec="grey", label=label)
        for m, f, label in LAYOUT_MARKS.values()
    ]
    handles += [plt.Line2D([], [], ls="", marker="o", color=c, label=f"next_n {n}") for n, c in colours.items()]
    handles.append(plt.Line2D([], [], color="black", lw=0.8, ls="--", label=f"{FLOOR}x"))
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--parts", type=Path, help="tab-separated part, exit status, seconds (one a line)")
    ap.add_argument("--summary", type=Path, help="write the summary as JSON here")
    ap.add_argument("--png", type=Path, help="draw every run's CUDA-graph rows here")
    args = ap.parse_args(argv)
    lines, missing = [], []
    for path in args.runs:
        if not path.is_file():
            missing.append(str(path))
            continue
        lines.append(dict(file=path.name, **line_report(json.loads(path.read_text()))))
    parts = read_parts(args.parts) if args.parts and args.parts.is_file() else []
    failed = [c for line in lines for c in line["checks"] if c["status"] == "FAIL"]
    summary = dict(lines=lines, missing_runs=missing, parts=parts, ok=not failed and not missing)
    for part in parts:
        print(f"[layouts] part {part['part']}: exit {part['exit_status']} ({part['wall_s']:.0f} s)")
    for path in missing:
        print(f"[layouts] {path}: no results")
    for line in lines:
        head = f"sglang {line['sglang']}, {line['rows']} rows{' (partial)' if line['partial'] else ''}"
        print(f"[layouts] {line['file']}: {head}")
        for c in line["checks"]:
            print(f"[layouts]   {c['status']:7s} {c['criterion']}: {c['detail']}")
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    if args.png and lines:
        plot([(path.name, json.loads(path.read_text())) for path in args.runs if path.is_file()], args.png)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
