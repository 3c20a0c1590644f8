"""`sglpatch gpu-leg`: one GPU CI leg (apply, upstream test_dsa.py, sglang's DSA kit, tests/gpu; engine: gpu/gpu_leg.py).

Exit status: 0 the leg passed its check, 1 it failed (the summary's check.problems say why),
2 it could not run (one line on stderr).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from sglpatch.gpu import ci_summary, gpu_leg


def add_arguments(parser) -> None:
    parser.add_argument("--leg", choices=("auto", *ci_summary.LEGS), default="auto", help="auto: from the GPU's SM")
    parser.add_argument("--sglang", type=Path, default=None, help="checkout or package folder (default build/sglang)")
    parser.add_argument("--patches", type=Path, default=None, help="series folder (default patches/)")
    parser.add_argument("--out", type=Path, default=None, help="output stem: STEM.json, STEM.xml, STEM.parts/")
    parser.add_argument("--python", default=sys.executable, help="the Python with torch, DeepGEMM and sglang's deps")
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers for tests/gpu (1: no xdist)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per part")
    parser.add_argument("--expectations", type=Path, default=None, help="default ci/leg-expectations.json")
    parser.add_argument("--skip-apply", action="store_true", help="the tree is already patched by other means")


def run(args) -> int:
    command = shlex.join(["sglpatch", *args.argv])
    return gpu_leg.run_leg(args, command, args.run_command)
