"""The JSON summary of one GPU CI leg, and the check of a leg against its expectations.

`sglpatch gpu-leg` (`make ci-gpu`) writes one summary per leg; docs/ci/gpu-leg-summary.md
documents the schema. Readers (the PR generator, `sglpatch leg-verdict`) load it with
`load_leg_summary`, which validates it and raises FatalError on anything malformed.

A leg passes when:
- at least one GPU test ran (passed or failed, not skipped) on a CUDA GPU;
- the GPU is of the kind the leg is for (H100 leg: SM90, B200 leg: SM100);
- no test failed (unless listed as a known failure in the expectations);
- every test the expectations require for that leg is present and passed.
"""

from __future__ import annotations

import fnmatch
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.project import PROJECT_ROOT

SCHEMA = "sglpatch.gpu-leg/1"
EXPECTATIONS_SCHEMA = "sglpatch.leg-expectations/1"
OUTCOMES = ("passed", "failed", "skipped")
LEGS = ("h100", "b200")
REQUIRED_KEYS = ("schema", "leg", "command", "environment", "parts", "tests", "counts")
ENVIRONMENT_KEYS = ("gpu", "compute_capability", "deep_gemm", "torch")
TEST_KEYS = ("nodeid", "outcome", "reason")


def default_expectations_path() -> Path:
    return PROJECT_ROOT / "ci" / "leg-expectations.json"


# -- loading -----------------------------------------------------------------------


def _read_json(path: Path, what: str):
    path = Path(path)
    if not path.is_file():
        raise FatalError(f"{path}: no {what} there")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise FatalError(f"{path}: {what} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise FatalError(f"{path}: {what} is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def validate_leg_summary(data, origin: str = "summary") -> dict:
    """Check the shape of a leg summary; return it unchanged. Raises FatalError naming the first problem."""
    if not isinstance(data, dict):
        raise FatalError(f"{origin}: a leg summary is a JSON object")
    if data.get("schema") != SCHEMA:
        raise FatalError(f"{origin}: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise FatalError(f"{origin}: no {key!r} field")
    env = data["environment"]
    if not isinstance(env, dict) or any(k not in env for k in ENVIRONMENT_KEYS):
        raise FatalError(f"{origin}: environment must hold {', '.join(ENVIRONMENT_KEYS)} (null where unknown)")
    if not isinstance(data["tests"], list):
        raise FatalError(f"{origin}: tests must be a list")
    for index, test in enumerate(data["tests"]):
        if not isinstance(test, dict) or any(k not in test for k in TEST_KEYS):
            raise FatalError(f"{origin}: tests[{index}] must hold {', '.join(TEST_KEYS)}")
        if test["outcome"] not in OUTCOMES:
            raise FatalError(f"{origin}: tests[{index}] ({test['nodeid']}) has outcome {test['outcome']!r}")
    if not isinstance(data["parts"], list):
        raise FatalError(f"{origin}: parts must be a list")
    return data


def load_leg_summary(path) -> dict:
    """Read and validate the JSON summary one GPU leg wrote (schema: docs/ci/gpu-leg-summary.md)."""
    return validate_leg_summary(_read_json(Path(path), "leg summary"), str(path))


def load_expectations(path=None) -> dict:
    path = Path(path) if path else default_expectations_path()
    data = _read_json(path, "leg expectations")
    if not isinstance(data, dict) or data.get("schema") != EXPECTATIONS_SCHEMA:
        raise FatalError(f"{path}: schema must be {EXPECTATIONS_SCHEMA!r}")
    legs = data.get("legs")
    if not isinstance(legs, dict) or not legs:
        raise FatalError(f"{path}: no legs")
    for name, leg in legs.items():
        if not isinstance(leg.get("compute_capability_major"), int):
            raise FatalError(f"{path}: leg {name} has no integer compute_capability_major")
        for index, req in enumerate(leg.get("required", [])):
            if ("nodeid" in req) == ("match" in req):
                raise FatalError(f"{path}: legs.{name}.required[{index}] needs exactly one of nodeid / match")
    return data


# -- counting ------------------------------------------------------------------------


def count_outcomes(tests: list[dict]) -> dict:
    counts = {outcome: 0 for outcome in OUTCOMES}
    for test in tests:
        counts[test["outcome"]] += 1
    return counts


def gpu_tests_ran(summary: dict) -> int:
    """Tests that ran (passed or failed) on a CUDA GPU; every test of a leg is a GPU test."""
    if not summary["environment"].get("gpu"):
        return 0
    return sum(1 for t in summary["tests"] if t["outcome"] != "skipped")


# -- the check -------------------------------------------------------------------------


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def check_leg(summary: dict, leg: str, expectations: dict) -> list[str]:
    """Every reason the leg fails, one line each; empty when it passes."""
    legs = expectations["legs"]
    if leg not in legs:
        raise FatalError(f"no expectations for leg {leg!r}; known: {', '.join(sorted(legs))}")
    want = legs[leg]
    problems: list[str] = []
    env = summary["environment"]
    tests = summary["tests"]
    by_id = {t["nodeid"]: t for t in tests}

    if not env.get("gpu"):
        problems.append("no CUDA GPU was visible to the leg (environment.gpu is null)")
    else:
        cc = str(env.get("compute_capability") or "")
        major = cc.split(".")[0]
        if major != str(want["compute_capability_major"]):
            problems.append(
                f"leg {leg} wants an SM{want['compute_capability_major']}x GPU, "
                f"ran on {env['gpu']} (compute capability {cc or 'unknown'})"
            )
    if gpu_tests_ran(summary) == 0:
        problems.append(f"no GPU test ran: {len(tests)} collected, all skipped or none at all")

    for part in summary["parts"]:
        if part.get("required", True) and part.get("status") == "error":
            problems.append(f"part {part.get('name')} did not run: {part.get('detail') or 'no detail'}")

    known = {k["nodeid"]: k.get("why", "") for k in want.get("known_failures", [])}
    for test in tests:
        if test["outcome"] == "failed" and test["nodeid"] not in known:
            problems.append(f"failed: {test['nodeid']}: {_short(test.get('reason'))}")

    skipped_modules = {t["nodeid"]: t.get("reason") for t in tests if "::" not in t["nodeid"]}
    absent_parts = {p.get("name") for p in summary["parts"] if p.get("status") == "absent"}
    for req in want.get("required", []):
        if req.get("if_part") in absent_parts:
            continue
        if "nodeid" in req:
            nodeid = req["nodeid"]
            test = by_id.get(nodeid)
            if test is None:
                module_reason = skipped_modules.get(_module_of(nodeid))
                detail = f" (its module was skipped: {_short(module_reason)})" if module_reason else ""
                problems.append(f"required test missing: {nodeid}{detail}")
            elif test["outcome"] == "skipped":
                problems.append(f"required test skipped: {nodeid}: {_short(test.get('reason'))}")
            elif test["outcome"] == "failed" and nodeid in known:
                problems.append(f"required test failed: {nodeid}: {_short(test.get('reason'))}")
        else:
            pattern, least = req["match"], int(req.get("min", 1))
            hits = [t for t in tests if fnmatch.fnmatchcase(t["nodeid"], pattern)]
            passed = [t for t in hits if t["outcome"] == "passed"]
            if len(passed) < least:
                outcomes = ", ".join(f"{t['nodeid'].split('::')[-1]}={t['outcome']}" for t in hits) or "none"
                problems.append(f"required: at least {least} passed test(s) matching {pattern}; got {outcomes}")
    return problems


def _short(text, limit: int = 200) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- junit ---------------------------------------------------------------------------------


def tests_from_junit(path: Path, part: str) -> list[dict]:
    """Per-test records from a pytest junit file: the one per-test recorder of the GPU leg and the kit.

    Written with `-o junit_family=xunit1`, each testcase names its file, so the pytest nodeid is
    rebuilt exactly (`file::Class::name`; a module skipped or broken at collection is its file).
    A skip's reason is pytest's own message; a failure's is its crash message."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise FatalError(f"{path}: cannot read junit xml: {exc}") from None
    records = []
    for case in root.iter("testcase"):
        outcome, reason = _junit_outcome(case)
        record = {
            "nodeid": junit_nodeid(case),
            "part": part,
            "outcome": outcome,
            "reason": reason,
            "duration_s": round(float(case.get("time") or 0.0), 3),
        }
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        if properties:
            record["properties"] = properties
        records.append(record)
    return records


def junit_nodeid(case: ET.Element) -> str:
    classname, name, file = case.get("classname", ""), case.get("name", ""), case.get("file")
    if not file:
        return f"{classname}::{name}"
    module = file.removesuffix(".py").replace("/", ".")
    if classname == module:
        return f"{file}::{name}"
    if classname.startswith(module + "."):
        return "::".join([file, *classname[len(module) + 1 :].split("."), name])
    if f"{classname}.{name}".strip(".") == module:  # a module skipped or broken at collection
        return file
    return f"{classname}::{name}"


_COLLECTION_SKIP = re.compile(r"Skipped: (?P<reason>.*)'\)$", re.DOTALL)


def _junit_outcome(case: ET.Element) -> tuple[str, str]:
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed", (child.get("message") or "").strip()[:500]
        if child.tag == "skipped":
            message = child.get("message") or ""
            found = _COLLECTION_SKIP.search(child.text or "") if message == "collection skipped" else None
            return "skipped", found.group("reason") if found else message
    return "passed", ""


def kit_metadata_layouts(kit_summary: dict) -> dict:
    """Per TARGET_VERIFY / DRAFT_EXTEND_V2 test of a DSA kit summary: the paged-MQA layout its metadata
    named (`metadata_layouts`). Summaries written before the rename call it `layouts_seen` and the
    schedule's shapes `deep_gemm_ctx_lens_shapes`; both read the same."""
    layouts = kit_summary.get("metadata_layouts", kit_summary.get("layouts_seen", {}))
    renamed = {"deep_gemm_ctx_lens_shapes": "schedule_ctx_lens_shapes"}
    return {test: {renamed.get(k, k): v for k, v in entry.items()} for test, entry in layouts.items()}


def merge_junit(parts: list[tuple[str, Path]], out: Path) -> None:
    """One <testsuites> file holding every part's suites, each renamed after its part."""
    merged = ET.Element("testsuites")
    for name, path in parts:
        if not Path(path).is_file():
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        for suite in suites:
            suite.set("name", name)
            merged.append(suite)
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(merged).write(out, encoding="utf-8", xml_declaration=True)
