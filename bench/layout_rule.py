"""The SM90 layout rule of patch 2, applied to the committed H200 kernel grid.

The kernel times in ``docs/results/paged_mqa_h200.json`` were measured on an
H200 with ``bench/paged_mqa.py`` for both layouts of every case (per-token and
native/paired), so the speedup of any rule can be read from them without a
GPU. This script calls the patched sglang function itself,
``dsa_backend._sm90_paged_mqa_layout``, imported from the patched tree on CPU;
only ``deep_gemm.get_num_sms`` is answered from the grid's recorded SM count.

For each case it prints, side by side, the speedup over per-token of:
- the previous series' rule (multi-token from 8 requests, lengths ignored);
- the patch's rule with host context lengths (eager forwards);
- the patch's rule at CUDA-graph capture (lengths unknown: batch size only).

Host lengths: uniform cases use the context length; ragged cases were drawn
uniformly from [ctx/2, ctx] by the kernel benchmark and are not recorded, so
they are approximated by 3/4 of ctx.

    python bench/layout_rule.py [--grid docs/results/paged_mqa_h200.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS_MIN_BATCH = 8


def load_rule(num_sms: int):
    """The patched rule from the tree tests/patched uses (build/sglang by default)."""
    sys.path.insert(0, str(ROOT / "tests" / "patched"))
    import cpu_sglang

    backend = cpu_sglang.import_sglang("sglang.srt.layers.attention.dsa_backend")
    backend.deep_gemm = SimpleNamespace(get_num_sms=lambda: num_sms)
    return backend._sm90_paged_mqa_layout


def speedups(rule, row):
    import torch

    multi = row["per_token_us"] / row["multi_us"]
    b, n, ctx = row["batch_size"], row["next_n"], row["ctx"]
    mean_len = ctx if row["lengths"] == "uniform" else ctx * 3 // 4
    host = rule(n, b, torch.full((b,), mean_len))
    graph = rule(n, b, None)
    return {
        "multi": multi,
        "previous": multi if b >= PREVIOUS_MIN_BATCH else 1.0,
        "host_lengths": multi if host.value != "per_token" else 1.0,
        "graph": multi if graph.value != "per_token" else 1.0,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, default=ROOT / "docs" / "results" / "paged_mqa_h200.json")
    args = parser.parse_args(argv)
    grid = json.loads(args.grid.read_text())
    print(f"importing the patched dsa_backend (about 15 s) ... grid: {args.grid.name}, {grid['device']}", flush=True)
    rule = load_rule(grid["num_sms"])
    rows = [r for r in grid["rows"] if "multi_us" in r]
    print(f"{'next_n':>6} {'B':>4} {'ctx':>6} {'lengths':>8} | {'multi':>6} {'prev':>6} {'host':>6} {'graph':>6}")
    results = []
    for row in rows:
        s = speedups(rule, row)
        results.append(s)
        print(
            f"{row['next_n']:>6} {row['batch_size']:>4} {row['ctx']:>6} {row['lengths']:>8} | "
            f"{s['multi']:>5.2f}x {s['previous']:>5.2f}x {s['host_lengths']:>5.2f}x {s['graph']:>5.2f}x"
        )
    print("\nover the whole grid (speedup over per-token of the layout each rule picks):")
    for key, label in (
        ("previous", "previous rule (B >= 8)"),
        ("host_lengths", "patch 2, host lengths"),
        ("graph", "patch 2, graph capture"),
    ):
        values = [s[key] for s in results]
        print(f"  {label:<24} min {min(values):.3f}x  geomean {statistics.geometric_mean(values):.3f}x")
    gains = [(r, s) for r, s in zip(rows, results, strict=True) if s["host_lengths"] > s["previous"]]
    print(f"  cases where host lengths gain over the previous rule: {len(gains)}")
    for r, s in gains:
        print(
            f"    next_n={r['next_n']} B={r['batch_size']} ctx={r['ctx']} {r['lengths']}: {s['previous']:.2f}x -> {s['host_lengths']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
