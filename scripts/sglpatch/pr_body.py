"""PR bodies in sglang's template, rendered from the series and committed results.

Sections: Motivation, Modifications, Accuracy Tests, Speed Tests and Profiling,
Checklist. Everything comes from files in the project (patch notes, GPU CI
summaries, benchmark JSON), so a body can be regenerated and reviewed. A body
must not leak: local paths are made relative and anything that looks like a
token is refused.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.series import Patch

_PARAGRAPH = re.compile(r"^(Why|What|Upstream|Drop when):\s*", re.MULTILINE)
_SECRET = re.compile(
    r"(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|xox[baprs]-[A-Za-z0-9-]{10,}|"
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)


@dataclass
class Group:
    id: str
    title: str
    branch: str
    patches: list[Patch]
    depends_on: list[str] = field(default_factory=list)
    accuracy: list[str] = field(default_factory=list)  # GPU CI summary files, project-relative
    benchmark: str | None = None  # benchmark JSON, project-relative
    accuracy_notes: list[str] = field(default_factory=list)  # what each GPU result ran, and what it did not
    speed_notes: list[str] = field(default_factory=list)  # said instead of a table when there is no benchmark


def note(patch: Patch, section: str) -> str:
    """One paragraph (Why / What / Upstream / Drop when) of a patch's message, unwrapped."""
    parts = _PARAGRAPH.split(patch.body)
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        if name == section:
            paragraph = text.split("\n\n")[0] if section != "What" else text.strip()
            return paragraph.strip()
    return ""


def render_body(
    group: Group,
    project: Path,
    stack: list[str],
    range_diff: str | None = None,
    rerun_lines: list[str] | None = None,
) -> str:
    lines = ["## Motivation", ""]
    for patch in group.patches:
        why = _unwrap(note(patch, "Why"))
        lines += [why[:1].upper() + why[1:], ""]
    upstream = sorted({n for p in group.patches for n in p.related_prs})
    if upstream:
        lines += ["Related: " + ", ".join(f"#{n}" for n in upstream), ""]
    lines += stack
    lines += ["## Modifications", ""]
    for number, patch in enumerate(group.patches, 1):
        files = ", ".join(f"`{p}`" for p in patch.touched_paths)
        lines += [f"{number}. **{patch.subject}** ({files})", "", _indent(note(patch, "What")), ""]
    lines += ["## Accuracy Tests", ""] + accuracy_section(group, project) + [""]
    lines += ["## Speed Tests and Profiling", ""] + speed_section(group, project) + [""]
    if range_diff:
        lines += ["## Changes since the previous version", "", "```", range_diff.rstrip(), "```", ""]
    if rerun_lines:
        lines += ["## CI", "", "Comment these to rerun the affected upstream tests:", "", "```"]
        lines += rerun_lines + ["```", ""]
    lines += [
        "## Checklist",
        "",
        "- [x] Format your code according to the code style (`pre-commit run` on the touched files: black, isort, "
        "ruff, codespell).",
        "- [x] Add unit tests (CPU tests of the patched modules and GPU tests; see Accuracy Tests).",
        "- [x] Provide accuracy and speed results where applicable.",
        "- [ ] Update documentation as needed.",
        "",
    ]
    return scrub("\n".join(lines), project)


def accuracy_section(group: Group, project: Path) -> list[str]:
    lines = []
    for paragraph in group.accuracy_notes:
        lines += [paragraph, ""]
    for relative in group.accuracy:
        summary = _load_json(project / relative)
        env = summary.get("environment", summary)
        tests = _tests_of(summary)
        passed = sorted(name for name, outcome, _ in tests if outcome == "passed")
        others = sorted(
            f"`{name}` ({outcome}{': ' + why if why else ''})" for name, outcome, why in tests if outcome != "passed"
        )
        lines += [
            f"GPU CI on **{env.get('gpu', 'unknown GPU')}** (SM {env.get('compute_capability', '?')}, "
            f"DeepGEMM {env.get('deep_gemm', '?')}, torch {env.get('torch', '?')}): "
            f"{len(passed)} passed, {len(others)} not passed (`{relative}`).",
            "",
            "<details><summary>tests that passed</summary>",
            "",
            *[f"- `{name}`" for name in passed],
            "",
            "</details>",
            "",
        ]
        if others:
            lines += ["Not passed: " + "; ".join(others), ""]
        if summary.get("command"):
            lines += [f"Command: `{summary['command']}`", ""]
    tests_named = sorted({t for p in group.patches for t in p.tests})
    if tests_named:
        lines += ["Tests of this change: " + ", ".join(f"`{t}`" for t in tests_named)]
    return lines or ["No GPU CI summary is recorded for this group yet."]


def _tests_of(summary: dict) -> list[tuple[str, str, str]]:
    """(name, outcome, reason) from a GPU leg summary (docs/ci/gpu-leg-summary.md)."""
    if not isinstance(summary.get("tests"), list):
        raise FatalError("a GPU CI summary has no 'tests' list (see docs/ci/gpu-leg-summary.md)")
    return [(t.get("nodeid", "?"), t.get("outcome", "?"), (t.get("reason") or "").strip()) for t in summary["tests"]]


def speed_section(group: Group, project: Path) -> list[str]:
    if not group.benchmark and group.speed_notes:
        return [line for paragraph in group.speed_notes for line in (paragraph, "")][:-1]
    if not group.benchmark:
        return ["No speed change is claimed for this group; it changes what the draft loop computes, not a kernel."]
    data = _load_json(project / group.benchmark)
    if "exercised" in data:
        return _indexer_step_table(data, group.benchmark)
    return _kernel_table(data, group.benchmark)


def _indexer_step_table(data: dict, source: str) -> list[str]:
    """The whole indexer step per TARGET_VERIFY forward, from the patched sglang code (bench/indexer_step.py)."""
    timed = [r for r in data["rows"] if r.get("cuda_graph") and r.get("speedup")]
    longest = max(r["ctx"] for r in timed)
    rows = [r for r in timed if r["ctx"] == longest]
    lines = [
        f"The whole paged indexer step of one TARGET_VERIFY forward (DeepGEMM logits plus the fused top-k "
        f"transform, replayed in a CUDA graph) through the patched `DeepseekSparseAttnBackend` and "
        f"`Indexer._get_topk_paged`, on **{data['device']}**, DeepGEMM {data['deep_gemm']}, torch {data['torch']}, "
        f"context {longest // 1024}k; per-token is v{data.get('sglang', '0.5.14')}'s SM90 path (`SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1`), "
        "chosen is the layout the patched code picked for that CUDA-graph batch size.",
        "",
        *_speed_rows(rows, layout_key="layout"),
    ]
    if data.get("command"):
        lines += ["", f"Command: `{data['command']}` (results: `{source}`)"]
    return lines


def _kernel_table(data: dict, source: str) -> list[str]:
    rows = [r for r in data["rows"] if r["ctx"] == max(x["ctx"] for x in data["rows"])]
    lines = [
        f"`fp8_paged_mqa_logits` on **{data['device']}** (SM {data['sm']}), DeepGEMM {data['deep_gemm']}, "
        f"H={data['heads']}, D={data['head_dim']}, context {rows[0]['ctx'] // 1024}k, median of {data['reps']} "
        "CUDA-graph replays; per-token is upstream's SM90 path, chosen is the layout this PR selects "
        f"(per-token below batch {data.get('min_batch_size', '?')}).",
        "",
        *_speed_rows(rows, layout_key="chosen_layout"),
    ]
    command = data.get("commands", {}).get("bench") or data.get("command")
    if command:
        lines += ["", f"Command: `{command}` (results: `{source}`)"]
    return lines


def _speed_rows(rows: list[dict], layout_key: str) -> list[str]:
    lines = [
        "| next_n | lengths | B | per-token us | chosen layout | chosen us | speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["next_n"], r["lengths"], r["batch_size"])):
        lines.append(
            f"| {r['next_n']} | {r['lengths']} | {r['batch_size']} | {r['per_token_us']:.1f} | "
            f"{r[layout_key]} | {r['chosen_us']:.1f} | {r['speedup']:.2f}x |"
        )
    return lines


def scrub(text: str, project: Path) -> str:
    """Make local paths relative, and refuse a body that carries something like a token."""
    if match := _SECRET.search(text):
        raise FatalError(f"the PR body would contain something that looks like a secret ({match.group(0)[:6]}…)")
    text = text.replace(str(project.resolve()) + "/", "").replace(str(project.resolve()), ".")
    home = os.path.expanduser("~")
    if home not in ("", "/") and home in text:
        text = text.replace(home, "~")
    return text


def _load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FatalError(f"{path} is missing (named in patches/pr-groups.json)") from None
    except ValueError as exc:
        raise FatalError(f"{path} is not valid JSON ({exc})") from None


def _unwrap(text: str) -> str:
    return " ".join(text.split())


def _indent(text: str) -> str:
    return "\n".join("   " + line if line.strip() else "" for line in text.splitlines())
