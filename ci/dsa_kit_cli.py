"""The DSA kit driver's command line: run ci/dsa_kit_driver.py under pytest, then write its JSON summary.

The per-test records come from pytest's own junit report (xunit1: the toolkit's one reader,
sglpatch.gpu.ci_summary.tests_from_junit), the environment from the toolkit's one probe
(sglpatch.gpu.gpu_environment), and the paged-MQA layouts from the recorder the tests filled
(ci/dsa_kit_layouts.py): `metadata_layouts` says, per TARGET_VERIFY and DRAFT_EXTEND_V2 test,
which layout the DSA metadata named (the kit never runs the indexer: no kernel call is seen).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "scripts")]

import pytest  # noqa: E402
from dsa_kit_layouts import RECORDER, sm90_rule_constants  # noqa: E402

from sglpatch.gpu.ci_summary import count_outcomes, tests_from_junit  # noqa: E402
from sglpatch.gpu.gpu_environment import environment_facts  # noqa: E402

DRIVER = HERE / "dsa_kit_driver.py"
LAYOUT_MODES = ("TARGET_VERIFY", "DRAFT_EXTEND_V2")


def metadata_layouts(tests: list[dict]) -> dict:
    """Per TARGET_VERIFY / DRAFT_EXTEND_V2 test: the layout expected, the metadata's field, the layout
    its 2D context lengths imply, and the shapes DeepGEMM's schedule was called with."""
    layouts = {}
    for test in tests:
        if "target_verify" not in test["nodeid"] and "draft_extend" not in test["nodeid"]:
            continue
        records = [r for r in test["metadata_layouts"] if r.get("forward_mode") in LAYOUT_MODES]
        layouts[test["nodeid"].split("::")[-1]] = {
            "outcome": test["outcome"],
            "expected": sorted({str(r.get("expected")) for r in records if "expected" in r}),
            "field": sorted({str(r.get("field_layout")) for r in records}),
            "inferred": sorted({str(r.get("inferred")) for r in records}),
            "ctx_lens_2d_shapes": [r.get("ctx_lens_2d_shape") for r in records],
            "schedule_ctx_lens_shapes": test["schedule_ctx_lens_shapes"],
        }
    return layouts


def build_summary(meta: dict, junit: Path, exit_status: int, wall_s: float) -> dict:
    tests = tests_from_junit(junit, "dsa-kit") if junit.is_file() else []
    for test in tests:
        test["metadata_layouts"] = RECORDER.records.get(test["nodeid"], [])
        test["schedule_ctx_lens_shapes"] = RECORDER.schedule_calls.get(test["nodeid"], [])
    by_outcome = {
        outcome: {t["nodeid"].split("::")[-1]: t["reason"] for t in tests if t["outcome"] == outcome}
        for outcome in ("skipped", "failed")
    }
    return {
        **meta,
        "environment": environment_facts(),
        "layout_field_names_seen": sorted(RECORDER.field_names),
        "layout_recorder_installed": RECORDER.installed,
        "sm90_rule": sm90_rule_constants(),
        "counts": count_outcomes(tests),
        "exit_status": exit_status,
        "wall_s": wall_s,
        "metadata_layouts": metadata_layouts(tests),
        "skipped": by_outcome["skipped"],
        "failed": by_outcome["failed"],
        "tests": tests,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="run sglang's DSA kit as pytest tests")
    ap.add_argument("--junit", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument(
        "--expect",
        choices=("auto", "pristine", "patched", "none"),
        default="auto",
        help="layout rule to assert in TARGET_VERIFY (auto: patched if patches applied)",
    )
    ap.add_argument("--label", default="")
    ap.add_argument("--command", default="", help="the command line that started this run")
    ap.add_argument("--patches-record", help="JSON written by ci/apply_series.py")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    patches = []
    if args.patches_record and Path(args.patches_record).exists():
        patches = json.loads(Path(args.patches_record).read_text())
    expect = args.expect if args.expect != "auto" else ("patched" if patches else "pristine")
    os.environ["DSA_KIT_EXPECT"] = expect
    meta = {
        "label": args.label or expect,
        "command": args.command,
        "tree": expect,
        "patches": patches,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    pytest_args = [str(DRIVER), "-v", "-rs", "-p", "no:cacheprovider", f"--junitxml={args.junit}"]
    pytest_args += ["-o", "junit_family=xunit1", "-o", f"junit_suite_name=dsa_kit_{meta['label']}"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        pytest_args += ["--timeout=300"]
    started = time.time()
    status = int(pytest.main(pytest_args + extra))
    summary = build_summary(meta, Path(args.junit), status, round(time.time() - started, 1))
    Path(args.summary).parent.mkdir(parents=True, exist_ok=True)
    Path(args.summary).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"[dsa-kit] summary: {summary['counts']} -> {args.summary}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
