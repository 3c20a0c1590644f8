"""The SM90 row-width rule of the series, applied to every committed H200 row that timed both widths.

The rule (``dsa_backend.pick_sm90_tokens_per_row`` on both lines) sees what a CUDA-graph capture sees:
next_n, the batch size and the block table's width. This script imports the patched function itself
from the tree tests/patched uses (build/sglang by default; CPU) and applies it to:

- ``docs/results/paged_mqa_h200.json``: the kernel grid (bench/paged_mqa.py, CUDA-graph replays of
  DeepGEMM alone; the block table as wide as the case's context);
- the CUDA-graph rows with two tokens per row of the indexer-step runs, ``indexer_h200.json``
  (v0.5.14) and ``indexer_h200_v0_5_23.json`` / ``_large.json`` (v0.5.23); their block table was the
  fixture's, as wide as the grid's longest context (64k).

These are the rows the rule was fitted on. It prints, per row, the measured speedup of two tokens per
row over one and the rule's choice; then the rows that set the rule's floors, and the speedup of the
rule's choices over the whole set. The hold-out grid (measured after the rule was fixed,
ci/run_gpu_layouts.sh) is not read here.

    python bench/layout_rule.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
INDEXER_RUNS = ("indexer_h200.json", "indexer_h200_v0_5_23.json", "indexer_h200_v0_5_23_large.json")


def load_rule():
    """The patched rule from the tree tests/patched uses (build/sglang by default)."""
    sys.path.insert(0, str(ROOT / "tests" / "patched"))
    import cpu_sglang

    return cpu_sglang.import_sglang("sglang.srt.layers.attention.dsa_backend").pick_sm90_tokens_per_row


def committed_rows(results: Path = RESULTS) -> list[dict]:
    kernel = json.loads((results / "paged_mqa_h200.json").read_text())
    rows = [
        dict(
            source="paged_mqa_h200 (kernel)",
            next_n=r["next_n"],
            batch_size=r["batch_size"],
            ctx=r["ctx"],
            lengths=r["lengths"],
            width=r["ctx"],
            speedup=r["per_token_us"] / r["multi_us"],
            num_sms=kernel["num_sms"],
        )
        for r in kernel["rows"]
    ]
    for name in INDEXER_RUNS:
        doc = json.loads((results / name).read_text())
        width = max(r["ctx"] for r in doc["rows"])
        rows += [
            dict(
                source=f"{name} (graph)",
                next_n=r["next_n"],
                batch_size=r["batch_size"],
                ctx=r["ctx"],
                lengths=r["lengths"],
                width=width,
                speedup=r["speedup"],
                num_sms=132,
            )
            for r in doc["rows"]
            if r["cuda_graph"] and r["layout"] in ("native", "paired")
        ]
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    print("importing the patched dsa_backend (about 15 s) ...", flush=True)
    rule = load_rule()
    rows = committed_rows(args.results)
    print(f"{'source':<40} {'next_n':>6} {'B':>4} {'ctx':>6} {'lengths':>8} {'width':>6} | {'2/row':>6} rule")
    chosen = []
    for r in rows:
        tokens = rule(r["next_n"], r["batch_size"], r["width"], r["num_sms"])
        r["tokens"] = tokens
        chosen.append(r["speedup"] if tokens == 2 else 1.0)
        print(
            f"{r['source']:<40} {r['next_n']:>6} {r['batch_size']:>4} {r['ctx']:>6} {r['lengths']:>8} "
            f"{r['width']:>6} | {r['speedup']:>5.3f}x {tokens}"
        )
    taken = [r for r in rows if r["tokens"] == 2]
    print(f"\n{len(rows)} rows; the rule takes two tokens per row in {len(taken)}")
    print(f"  lowest measured speedup where it does: {min(r['speedup'] for r in taken):.3f}x")
    print(f"  speedup of its choices: min {min(chosen):.3f}x, geomean {statistics.geometric_mean(chosen):.3f}x")
    print("rows that set the floors (8 and 16 two-token rows; the lowest speedup of each):")
    for label, pick in (
        ("8 rows (next_n 2 x 8, next_n 4 x 4)", lambda r: r["batch_size"] * (r["next_n"] // 2) == 8),
        ("16 rows (next_n 2 x 16, next_n 4 x 8)", lambda r: r["batch_size"] * (r["next_n"] // 2) == 16),
    ):
        group = sorted((r for r in rows if pick(r)), key=lambda r: r["speedup"])
        low = ", ".join(
            f"{r['speedup']:.3f}x ({r['source']}, n={r['next_n']} B={r['batch_size']} {r['ctx']} {r['lengths']})"
            for r in group[:3]
        )
        print(f"  {label}: {len(group)} rows, lowest {low}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
