"""Which upstream CI tests a patch group should rerun, as sglang PR comment lines.

The mapping from touched source paths to upstream test files is data: ci/rerun-map.json
(globs over patch paths -> test files, and each test file's runner configs). sglang's PR
bot takes `/rerun-test <test file>` (one GPU job on the runner the file registers for),
`/tag-run-ci-label` (CI runs only with the `run-ci` label) and `/rerun-failed-ci`.

`rerun_comment_lines(patches)` is what the PR generator calls; `sglpatch rerun` prints the
lines for each Patch-Group of the series, with the local commands that run the same tests.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.project import PROJECT_ROOT
from sglpatch.series import Patch

MAP_SCHEMA = "sglpatch.rerun-map/1"
TAG_RUN_CI = "/tag-run-ci-label"
RERUN_FAILED = "/rerun-failed-ci"
RERUN_TEST = "/rerun-test"


def default_map_path() -> Path:
    return PROJECT_ROOT / "ci" / "rerun-map.json"


@dataclass
class RerunMap:
    tests: dict[str, dict]  # test file -> {"runner_configs": [...], "gpus": n, "what": ...}
    rules: list[dict]  # {"glob": ..., "tests": [...]} in file order

    def tests_for(self, path: str) -> list[str]:
        found: list[str] = []
        for rule in self.rules:
            if fnmatch.fnmatchcase(path, rule["glob"]):
                found += [t for t in rule["tests"] if t not in found]
        return found


def load_rerun_map(path=None) -> RerunMap:
    path = Path(path) if path else default_map_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FatalError(f"{path}: no rerun map there") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FatalError(f"{path}: not a JSON rerun map ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != MAP_SCHEMA:
        raise FatalError(f"{path}: schema must be {MAP_SCHEMA!r}")
    tests, rules = data.get("upstream_tests"), data.get("rules")
    if not isinstance(tests, dict) or not isinstance(rules, list):
        raise FatalError(f"{path}: needs an upstream_tests object and a rules list")
    for name, info in tests.items():
        if not name.startswith("test/") or not name.endswith(".py"):
            raise FatalError(f"{path}: upstream test {name!r} is not a test/....py path from the sglang root")
        if not isinstance(info, dict) or not info.get("runner_configs"):
            raise FatalError(f"{path}: upstream test {name} names no runner_configs")
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("glob"), str) or not rule.get("tests"):
            raise FatalError(f"{path}: rules[{index}] needs a glob and a non-empty tests list")
        for test in rule["tests"]:
            if test not in tests:
                raise FatalError(f"{path}: rules[{index}] ({rule['glob']}) names {test}, which upstream_tests lacks")
    return RerunMap(tests=tests, rules=rules)


# -- planning --------------------------------------------------------------------------


@dataclass
class RerunPlan:
    tests: list[str] = field(default_factory=list)  # upstream test files, in first-touched order
    by_path: dict[str, list[str]] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)  # touched paths no rule covers


def plan_reruns(patches: list[Patch], rerun_map: RerunMap) -> RerunPlan:
    plan = RerunPlan()
    for patch in patches:
        for path in patch.touched_paths:
            if path in plan.by_path or path in plan.unmapped:
                continue
            tests = rerun_map.tests_for(path)
            if not tests:
                plan.unmapped.append(path)
                continue
            plan.by_path[path] = tests
            plan.tests += [t for t in tests if t not in plan.tests]
    plan.tests.sort(key=lambda t: rerun_map.tests[t].get("gpus", 1))  # cheap jobs first; stable otherwise
    return plan


def rerun_comment_lines(
    patches: list[Patch], *, labeled: bool = False, ci_failed: bool = False, rerun_map: RerunMap | None = None
) -> list[str]:
    """The PR comment lines that rerun upstream's CI for what these patches touch.

    labeled: the PR already has the run-ci label (else `/tag-run-ci-label` comes first);
    ci_failed: a CI run of the PR failed (adds `/rerun-failed-ci`).
    Raises FatalError naming any touched path the rerun map does not cover: a PR body must
    not claim coverage it lacks.
    """
    rerun_map = rerun_map or load_rerun_map()
    plan = plan_reruns(patches, rerun_map)
    if plan.unmapped:
        raise FatalError(
            f"no upstream test is mapped for {', '.join(plan.unmapped)}: add a rule to {default_map_path().name}"
        )
    lines = []
    if not labeled and not ci_failed:
        lines.append(TAG_RUN_CI)
    if ci_failed:
        lines.append(RERUN_FAILED)
    lines += [f"{RERUN_TEST} {test}" for test in plan.tests]
    return lines


def local_commands(tests: list[str], rerun_map: RerunMap, sglang: str = "$SGLANG") -> list[str]:
    """Shell lines that run the same tests on one machine: the project's GPU leg, then each
    upstream file the way upstream's rerun job runs it (`cd test && python3 FILE -f`)."""
    root = sglang if sglang.startswith("$") else shlex.quote(sglang)
    lines = [f"make ci-gpu SGLANG={root}"]
    for test in tests:
        info = rerun_map.tests[test]
        relative = test.removeprefix("test/")
        need = f"  # needs {info['gpus']} GPUs ({', '.join(info['runner_configs'])})" if info.get("gpus", 1) > 1 else ""
        lines.append(f"(cd {root}/test && python3 {relative} -f){need}")
    return lines
