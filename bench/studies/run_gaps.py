"""The gap between one timed run's end and the next one's start over an engine call, and what reading each probe file
whole cost the worker at the call's end. No GPU: it reads a call's committed JSON (each timed run's window, the rows'
``host_runs``) and the archive beside it (each engine's probe files as the call left them).

    python bench/studies/run_gaps.py docs/results/engine_h100_floor64k_aa_run2.json

Until 6 Dec 2026 the worker parsed each probe file whole after every run (bench/engine_worker.py, ProbeFile); the
parse time printed here is that whole read, timed on the machine this runs on, not on the GPU box.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

PARTS = 6  # the call's runs in sixths, in time order
FILES = ("steps.jsonl", "verify.jsonl")  # what the worker read after every timed run


def windows(doc: dict) -> list[tuple[float, float]]:
    """Every engine's timed runs of the call's rows, as (start, end), in time order."""
    out = []
    for row in doc["rows"]:
        for label in ("pristine", "patched"):
            out += [tuple(h["window"]) for h in (row.get(label) or {}).get("host_runs") or []]
        out += [tuple(h["window"]) for h in row.get("host_runs_pristine_b") or []]
    return sorted(out)


def gaps_by_part(runs: list[tuple[float, float]]) -> list[dict]:
    """The gaps from one run's end to the next run's start, in PARTS stretches of the call: median, least, most."""
    gaps = [b[0] - a[1] for a, b in zip(runs, runs[1:], strict=False)]
    size = max(1, -(-len(gaps) // PARTS))
    return [
        {"gaps": len(part), "median": statistics.median(part), "least": min(part), "most": max(part)}
        for part in (gaps[i : i + size] for i in range(0, len(gaps), size))
    ]


def whole_read_ms(archive: Path, repeats: int = 5) -> dict[str, dict]:
    """Per probe file of the first engine in the archive: its bytes, records, and the milliseconds one whole read
    and parse of it takes here (the mean of ``repeats``)."""
    out = {}
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            path = PurePosixPath(member.name)
            if path.name not in FILES or path.name in out or not path.parent.name.startswith("probe-"):
                continue
            text = tar.extractfile(member).read().decode()
            t0 = time.perf_counter()
            for _ in range(repeats):
                records = [json.loads(line) for line in text.splitlines() if line.strip()]
            ms = (time.perf_counter() - t0) / repeats * 1000.0
            out[path.name] = {"engine": path.parent.name, "bytes": len(text), "records": len(records), "ms": ms}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine_json", type=Path, help="an engine call's JSON, its _engines.tar.gz beside it")
    args = ap.parse_args(argv)
    archive = args.engine_json.with_name(args.engine_json.name.removesuffix(".json") + "_engines.tar.gz")
    if not args.engine_json.exists() or not archive.exists():
        print(f"run_gaps: {args.engine_json} and {archive.name} beside it are both needed", file=sys.stderr)
        return 2
    runs = windows(json.loads(args.engine_json.read_text()))
    print(f"{args.engine_json.name}: {len(runs)} timed runs; the gap from a run's end to the next run's start (s):")
    for k, part in enumerate(gaps_by_part(runs), 1):
        print(
            f"  part {k} of {PARTS}: median {part['median']:.3f}, {part['least']:.3f}-{part['most']:.3f} ({part['gaps']} gaps)"
        )
    print("one whole read and parse of each probe file as the call left it, on this machine:")
    for name, f in whole_read_ms(archive).items():
        print(f"  {f['engine']}/{name}: {f['bytes'] / 1e6:.1f} MB, {f['records']} records, {f['ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
