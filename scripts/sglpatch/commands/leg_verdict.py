"""`sglpatch leg-verdict SUMMARY --leg h100|b200`: does a GPU leg's summary meet its expectations?

Prints one line per problem and a verdict. Exit status: 0 the leg passes, 1 it fails
(a required test skipped, failed or missing, any test failed, no GPU test ran, wrong GPU),
2 the summary or the expectations cannot be read.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.gpu.ci_summary import LEGS, check_leg, gpu_tests_ran, load_expectations, load_leg_summary
from sglpatch.output import say


def add_arguments(parser) -> None:
    parser.add_argument("summary", type=Path, metavar="SUMMARY", help="the JSON summary `sglpatch gpu-leg` wrote")
    parser.add_argument("--leg", choices=LEGS, default=None, help="which leg's expectations (default: the summary's)")
    parser.add_argument(
        "--expectations", type=Path, default=None, metavar="FILE", help="default: ci/leg-expectations.json"
    )


def run(args) -> int:
    summary = load_leg_summary(args.summary)
    leg = args.leg or summary["leg"]
    problems = check_leg(summary, leg, load_expectations(args.expectations))
    env, counts = summary["environment"], summary["counts"]
    say(
        f"leg {leg}: {env.get('gpu') or 'no GPU'} (SM {env.get('compute_capability') or '?'}), "
        f"torch {env.get('torch') or '?'}, DeepGEMM {env.get('deep_gemm') or '?'}"
    )
    say(
        f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"({gpu_tests_ran(summary)} ran on the GPU)"
    )
    for problem in problems:
        say(f"  FAIL {problem}")
    say(f"leg {leg}: {'passed' if not problems else 'FAILED'}")
    return 0 if not problems else 1
