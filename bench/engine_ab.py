"""sglang's own engine with MTP, pristine against patched, on one GPU: the number users see.

For each next_n, two ``sglang.Engine`` processes run side by side on the GPU (three with
``--two-process-aa``): one imports the pristine tree, the other the patched tree, both given the same
model folder (bench/engine_model.py: DeepSeek-V3.2 shapes, dummy weights from sglang's fixed seed),
the same arguments (EAGLE with the NextN draft, topk 1, ``next_n - 1`` steps; sglang's defaults
otherwise: decode CUDA graphs on, overlap scheduler on, radix cache on) and the same requests
(``--patched-only``: the patched engine alone, its own measures, nothing compared). How a
run goes: bench/engine/driver.py; what a row says: bench/engine/rows.py; the other parts:
bench/engine/__init__.py.

This is the command line only: it parses, and bench/engine/driver.py runs.

    python bench/engine_ab.py --pristine P/ --patched X/ --next-n 2,4 --out engine.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.engine import driver  # noqa: E402
from bench.engine.grid import GRIDS  # noqa: E402
from bench.engine.processes import WORKER_SCRIPT  # noqa: E402
from bench.engine.sizing import KV_CACHES  # noqa: E402


def ints(text: str) -> list[int]:
    """``2,3,4`` -> [2, 3, 4]; an empty text is an empty list."""
    return [int(item) for item in text.split(",") if item]


def parse_acceptance(text: str) -> dict[int, float]:
    """``4:3,6:4`` -> {4: 3.0, 6: 4.0}: the simulated acceptance length per next_n."""
    out = {}
    for item in filter(None, text.split(",")):
        next_n, _, length = item.partition(":")
        out[int(next_n)] = float(length)
        if not 1 <= out[int(next_n)] <= int(next_n):
            raise ValueError(f"acceptance {item!r}: the length must lie in 1..next_n")
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pristine", required=True, type=Path, help="folder holding the pristine sglang/ package")
    ap.add_argument("--patched", required=True, type=Path, help="folder holding the patched sglang/ package")
    ap.add_argument("--line", default="v0.5.14")
    ap.add_argument("--next-n", default="2,4", help="comma-separated next_n values (default 2,4)")
    ap.add_argument("--grid", default="full", choices=sorted(GRIDS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=4, help="runs per engine per case, ABBA order (default 4)")
    ap.add_argument("--skip", type=int, default=2, help="verify steps left out at the start of each run")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--profile-from", type=int, default=32 * 16384, help="profile cases with batch x context >= this")
    ap.add_argument("--margins", action="store_true", help="re-run a diverging case with top-2 logprobs")
    ap.add_argument(
        "--seed-case",
        default="",
        metavar="NEXT_N,...",
        help="also run the IndexShare case at these next_n (comma-separated)",
    )
    ap.add_argument("--deadline-s", type=float, default=540, help="stop starting new work after this many seconds")
    ap.add_argument("--min-block-s", type=float, default=120, help="time a next_n block needs before any has run")
    ap.add_argument(
        "--extra-path", default="", help="os.pathsep-separated folders after the tree (the bundle's packages)"
    )
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="environment for both engines")
    ap.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="K=JSON",
        help="an sglang.Engine argument for both engines (e.g. tp_size=2, enable_dp_attention=true)",
    )
    ap.add_argument(
        "--kv-cache", default="bfloat16", choices=sorted(KV_CACHES), help="the KV cache and the DSA backends reading it"
    )
    ap.add_argument(
        "--acceptance",
        default="",
        metavar="N:LEN,...",
        help="timed runs with sglang's SGLANG_SIMULATE_ACC_LEN at LEN for next_n N (e.g. 4:3,6:4); greedy otherwise",
    )
    ap.add_argument(
        "--two-process-aa", action="store_true", help="a second pristine engine process: the A/A floor of two processes"
    )
    ap.add_argument(
        "--patched-only",
        action="store_true",
        help="the patched engine alone (its host time, e.g. draft-extend's, at pools too big for two engines' "
        "prefills in one call): no pristine engine, so the rows compare nothing",
    )
    ap.add_argument("--pin-cpus", action="store_true", help="each engine's processes on cores of their own")
    ap.add_argument(
        "--same-layout",
        action="store_true",
        help="every engine process with PYTHONHASHSEED=0 and ASLR off: two processes of one tree alike in both",
    )
    ap.add_argument(
        "--gpu-memory-gib",
        type=float,
        help="the GPU's memory for the check that every engine fits at once (default: nvidia-smi's; none: no check)",
    )
    ap.add_argument("--check-memory", action="store_true", help="print the memory estimate and stop (no engine starts)")
    ap.add_argument("--series-record", type=Path, help="ci/apply_series.py's record of what the patched tree carries")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--command", help="the command line to record")
    ap.add_argument("--worker-script", type=Path, default=WORKER_SCRIPT, help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.acceptance = parse_acceptance(args.acceptance)
    args.next_n, args.seed_case = ints(args.next_n), ints(args.seed_case)
    return driver.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
