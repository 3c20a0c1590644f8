"""PR bodies in sglang's template, rendered from the series and committed results.

Main text: Motivation, Modifications, Accuracy Tests, Speed Tests and Profiling, Prior
art, Checklist; then a collapsed appendix (the group's `appendix` paragraphs, the tables
made from committed results, the changes since the version pushed before, the CI
comments). Everything comes from files in the project (patch notes, pr-groups.json, GPU
CI summaries, benchmark JSON), so a body can be regenerated and reviewed.

A body stands alone for an upstream reader and is read in two minutes, so it is refused (one
line) when it:
- cites a path only this project has (docs/results/..., bench/..., tests/..., patches/...,
  ci/...; `project_only_path`): the notes say what such a file holds inline instead, and a
  table made from one names its run and versions, and its command only when that command
  names no project path;
- uses a term only this project uses (PROJECT_TERMS: "A/A", "hold-out", "floor", "DG-native"),
  anywhere but in the range-diff: the notes say it in plain words;
- has a main text over MAIN_TEXT_LIMIT characters (the appendix does not count), or more than
  one table in it: the group's `numbers` (each number with what ran for it) are that table, and
  every other table goes to the collapsed appendix;
- cites a PR in a patch trailer (Extends-PR, Upstream-PR) that its Prior art does not name with
  what that PR did (a bare "#N" tells the reader nothing);
- carries something that looks like a token. Local paths are made relative.
The checklist ticks an item only where the group's `checklist` says what ran for it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.series import TEST_TREE_PREFIX, Patch, sha256_hex

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
    # sglang's own engine, pristine vs patched: {"file": bench/engine/report.py JSON, "line": ..., "next_n": [...],
    # "runs": [file names], "requests": [batch sizes]}; each key but "file" narrows the rows cited
    engine: dict | None = None
    # [{"pr": N, "note": how this PR differs}]; "repo": "owner/name" for a PR outside sglang
    prior_art: list[dict] = field(default_factory=list)
    checklist: dict[str, str] = field(default_factory=dict)  # CHECKLIST key -> what ran for it (ticked)
    appendix: list[str] = field(default_factory=list)  # paragraphs for the collapsed appendix
    # the main text's one table: [{"measure": ..., "result": ..., "ran": what ran, its versions}]
    numbers: list[dict] = field(default_factory=list)
    upstream: str = "sgl-project/sglang"  # the repository the PR goes to
    held: str | None = None  # why no PR is prepared for the group (yet), a sentence; None: it goes upstream


# The checklist of sglang's PR template, in this project's words; a key of a group's `checklist`.
CHECKLIST = {
    "format": "Code formatted to sglang's style (its pre-commit hooks)",
    "unit_tests": "Unit tests added or updated",
    "docs": "Documentation updated",
    "benchmark": "Accuracy and speed results provided",
}
MAIN_TEXT_LIMIT = 4000
NUMBERS_COLUMNS = ("measure", "result", "ran")
# Words only this project uses, and what to say instead.
PROJECT_TERMS = {
    r"A/A": "a pristine run against another pristine run",
    r"hold-?out": "a grid measured after the rule was fixed",
    r"floors?": "two pristine processes against each other",
    r"DG-native": "DeepGEMM's [B, next_n] rows",
}
_TERM = re.compile("|".join(rf"(?<![\w/-])({term})(?![\w/-])" for term in PROJECT_TERMS), re.IGNORECASE)
# Top-level folders only this project has (sglang's tree has python/, test/, benchmark/, docs/, scripts/, ...).
_PROJECT_FOLDERS = ("bench", "tests", "testing", "patches", "ci", "build")
_PROJECT_DOCS = ("docs/results/", "docs/patches/", "docs/pr/", "docs/ci/", "docs/drift/", "docs/rebase/")
_PATH_TOKEN = re.compile(r"(?<![\w./-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]*)")


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
    refuse_unnamed_related(group)
    main = _main_text(group, stack)
    appendix = _paragraphs(group.appendix) + _appendix_tables(group, project)
    body = scrub("\n".join(main), project)
    theirs = frozenset(path for patch in group.patches for path in patch.touched_paths)
    refuse_project_paths(body + "\n" + "\n".join(appendix), project, group.id, theirs)
    refuse_project_terms(body + "\n" + "\n".join(appendix), group.id)
    if rerun_lines:
        appendix += ["", "### CI", "", "Comment these to rerun the affected upstream tests:", "", "```"]
        appendix += rerun_lines + ["```"]
    if len(body) > MAIN_TEXT_LIMIT:
        raise FatalError(
            f"the {group.id} PR body's main text is {len(body):,} characters, more than {MAIN_TEXT_LIMIT:,}: shorten "
            "its notes or move paragraphs to the group's 'appendix' in pr-groups.json"
        )
    if (tables := count_tables(body)) > 1:
        raise FatalError(
            f"the {group.id} PR body's main text holds {tables} tables: keep one (the group's 'numbers') and move "
            "the others to the appendix"
        )
    if range_diff:  # git's output about the PR's own commits: not checked for paths
        appendix += ["", "### Changes since the version pushed before", "", "```", range_diff.rstrip(), "```"]
    if appendix:
        body += "\n" + scrub(
            "\n".join(["<details><summary>Appendix</summary>", "", *appendix, "", "</details>", ""]), project
        )
    return body


def _main_text(group: Group, stack: list[str]) -> list[str]:
    lines = ["## Motivation", ""]
    for patch in group.patches:
        why = _unwrap(note(patch, "Why"))
        lines += [why[:1].upper() + why[1:], ""]
    lines += stack
    lines += ["## Modifications", ""]
    for number, patch in enumerate(group.patches, 1):
        files = ", ".join(f"`{p}`" for p in short_paths(patch.touched_paths))
        lines += [f"{number}. **{patch.subject}** ({files})", "", _indent(note(patch, "What")), ""]
    lines += ["## Accuracy Tests", ""] + accuracy_section(group) + [""]
    lines += ["## Speed Tests and Profiling", ""] + numbers_table(group) + _speed_notes(group) + [""]
    lines += ["## Prior art", ""] + _prior_art(group) + [""]
    lines += ["## Checklist", ""] + checklist_lines(group) + [""]
    return lines


def short_paths(paths: list[str]) -> list[str]:
    """File names as Modifications lists them (the diff has the paths): the name alone where it is unique."""
    names = [path.rsplit("/", 1)[-1] for path in paths]
    return [name if names.count(name) == 1 else path for name, path in zip(names, paths, strict=True)]


def _prior_art(group: Group) -> list[str]:
    if not group.prior_art:
        return ["None named for this change."]
    return [f"- {item.get('repo', '')}#{item['pr']}: {item['note']}" for item in group.prior_art]


def numbers_table(group: Group) -> list[str]:
    """The group's numbers as the main text's one table: each result beside what ran for it."""
    if not group.numbers:
        return []
    lines = ["| measure | result | what ran |", "|---|---|---|"]
    lines += [f"| {row['measure']} | {row['result']} | {row['ran']} |" for row in group.numbers]
    return lines + [""]


def count_tables(text: str) -> int:
    """Markdown tables in ``text``: their header separator rows."""
    return sum(1 for line in text.splitlines() if re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", line.strip()))


def refuse_project_terms(text: str, group_id: str) -> None:
    if match := _TERM.search(text):
        plain = next(words for term, words in PROJECT_TERMS.items() if re.fullmatch(term, match.group(0), re.I))
        raise FatalError(
            f"the {group_id} PR body says {match.group(0)!r}, a term only this project uses: say it plainly "
            f"({plain})"
        )


def refuse_unnamed_related(group: Group) -> None:
    named = {item["pr"] for item in group.prior_art if not item.get("repo")}
    for number in sorted({int(n) for p in group.patches for n in p.related_prs if n.isdigit()}):
        if number not in named:
            raise FatalError(
                f"the {group.id} PR cites #{number} in a patch trailer but its prior_art does not name it: add "
                f'{{"pr": {number}, "note": what it did and how this PR differs}} in pr-groups.json'
            )


def checklist_lines(group: Group) -> list[str]:
    """One line per item of sglang's checklist, ticked only where the group says what ran for it."""
    lines = []
    for key, label in CHECKLIST.items():
        ran = group.checklist.get(key)
        if key == "format" and group.upstream != "sgl-project/sglang":
            label = f"Code formatted to {group.upstream}'s style"
        lines.append(f"- [x] {label}: {ran}" if ran else f"- [ ] {label}")
    return lines


def project_only_path(text: str, project: Path, theirs: frozenset[str] = frozenset()) -> str | None:
    """The first path in `text` that only this project has (an upstream reader cannot open it), or None. A path in
    `theirs` (a file the PR itself changes, so the receiver has it: DeepGEMM's tests/ is its own) is not one."""
    for match in _PATH_TOKEN.finditer(text):
        path = match.group(1).rstrip(".,;:")
        if path in theirs:
            continue
        first = path.split("/", 1)[0]
        if first in _PROJECT_FOLDERS or path.startswith("scripts/sglpatch"):
            return path
        if first == "docs" and (path.startswith(_PROJECT_DOCS) or (project / path).is_file()):
            return path
    return None


def refuse_project_paths(text: str, project: Path, group_id: str, theirs: frozenset[str] = frozenset()) -> None:
    if path := project_only_path(text, project, theirs):
        raise FatalError(
            f"the {group_id} PR body cites {path}, a path only this project has: say inline what it shows "
            "(the numbers, their source, command and versions) in pr-groups.json or the patch notes"
        )


def accuracy_section(group: Group) -> list[str]:
    paragraphs = list(group.accuracy_notes)
    tests = sorted({path for p in group.patches for path in p.touched_paths if path.startswith(TEST_TREE_PREFIX)})
    if tests:
        paragraphs.append("Tests in sglang's tree this PR adds or changes: " + ", ".join(f"`{t}`" for t in tests))
    if group.accuracy:
        paragraphs.append("The GPU CI results are listed in the appendix.")
    return _paragraphs(paragraphs) or ["No accuracy result is claimed for this group."]


def _gpu_ci_summaries(group: Group, project: Path) -> list[str]:
    lines = []
    for relative in group.accuracy:
        summary = _load_json(project / relative)
        env = summary.get("environment", summary)
        tests = [(_test_label(name), outcome, why) for name, outcome, why in _tests_of(summary)]
        passed = sorted(name for name, outcome, _ in tests if outcome == "passed")
        others = sorted(
            f"`{name}` ({outcome}{': ' + why if why else ''})" for name, outcome, why in tests if outcome != "passed"
        )
        lines += [
            f"GPU CI on **{env.get('gpu', 'unknown GPU')}** (SM {env.get('compute_capability', '?')}, "
            f"DeepGEMM {env.get('deep_gemm', '?')}, torch {env.get('torch', '?')}): "
            f"{len(passed)} passed, {len(others)} not passed.",
            "",
            "Tests that passed (the series' own tests, outside sglang's tree, by name only):",
            "",
            *[f"- `{name}`" for name in passed],
            "",
        ]
        if others:
            lines += ["Not passed: " + "; ".join(others), ""]
        if command := upstream_command(summary.get("command")):
            lines += [f"Command: `{command}`", ""]
    return lines


def _test_label(nodeid: str) -> str:
    """A test as the body names it: its pytest id, or only its name when its file is this project's."""
    path, _, name = nodeid.partition("::")
    return name if name and project_only_path(path, Path("/nonexistent")) else nodeid


def _appendix_tables(group: Group, project: Path) -> list[str]:
    """The tables made from committed results: the engine's rows first, then the indexer step and the kernel
    (each labelled), then the GPU CI summaries."""
    parts = []
    if group.engine or group.benchmark:
        parts += ["", "### Speed tables", "", *speed_section(group, project)]
    if group.accuracy:
        parts += ["", "### GPU CI", "", *_gpu_ci_summaries(group, project)]
    return parts


def upstream_command(command: str | None) -> str | None:
    """A results file's command, when an upstream reader could run it (it names no project path)."""
    return command if command and project_only_path(command, Path("/nonexistent")) is None else None


def _tests_of(summary: dict) -> list[tuple[str, str, str]]:
    """(name, outcome, reason) from a GPU leg summary (docs/ci/gpu-leg-summary.md)."""
    if not isinstance(summary.get("tests"), list):
        raise FatalError("a GPU CI summary has no 'tests' list (see docs/ci/gpu-leg-summary.md)")
    return [(t.get("nodeid", "?"), t.get("outcome", "?"), (t.get("reason") or "").strip()) for t in summary["tests"]]


def _speed_notes(group: Group) -> list[str]:
    paragraphs = list(group.speed_notes)
    if group.engine or group.benchmark:
        paragraphs.append("The tables are in the appendix.")
    return _paragraphs(paragraphs) or ["No speed change is claimed for this group."]


def speed_section(group: Group, project: Path) -> list[str]:
    """The engine table, then the indexer step alone; without an engine run, the benchmark."""
    if not group.engine:
        return _benchmark_section(group, project)
    lines = _engine_table(_load_json(project / group.engine["file"]), group.engine, group.patches)
    if group.benchmark:
        lines += ["", "**The indexer step alone** (it explains the gain above; it is not what a user sees):", ""]
        lines += _benchmark_section(group, project)
    return lines


def _paragraphs(texts: list[str]) -> list[str]:
    return [line for paragraph in texts for line in (paragraph, "")][:-1]


def _benchmark_section(group: Group, project: Path) -> list[str]:
    data = _load_json(project / group.benchmark)
    if "exercised" in data:
        return _indexer_step_table(data)
    return _kernel_table(data)


_GATE_SKIPPED = " (past sglang's sglang-kernel version check: `SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1`)"


def _engine_table(data: dict, cited: dict, ours: list[Patch]) -> list[str]:
    """sglang's own engine with MTP, pristine against patched (bench/engine_ab.py runs, combined), the rows of
    the cited line, next_n values, runs and batch sizes (each optional); each run names the patches it applied
    and which of them are this PR's commits (`ours`)."""
    runs = {run["run"]: run for run in data["runs"]}
    rows = [
        r
        for r in data["rows"]
        if r.get("speedup_verify")
        and r.get("line") == cited.get("line", r.get("line"))
        and r["next_n"] in cited.get("next_n", [r["next_n"]])
        and r["run"] in cited.get("runs", [r["run"]])
        and r["batch_size"] in cited.get("requests", [r["batch_size"]])
    ]
    lines = [
        "sglang's own `Engine` on one GPU with MTP (EAGLE, NextN draft, topk 1), decode CUDA graphs and the overlap "
        "scheduler, pristine and patched engines side by side on the same requests; a model of DeepSeek-V3.2's "
        "attention and indexer shapes (4 decoder layers with a dense 18432-wide FFN standing in for one rank's MoE, "
        "a 32-expert NextN layer), dummy weights, greedy; `verify` is the TARGET_VERIFY forward's GPU time, `step` "
        f"the scheduler's time from one verify forward to the next ({_acceptance(rows)}), `pristine re-run` is "
        "pristine against its own re-runs.",
        "",
    ]
    for name in sorted({r["run"] for r in rows}):
        run = runs[name]
        v = run.get("versions") or {}
        patches = ", ".join(_run_patch(p, ours) for p in run.get("series", [])) or "?"
        lines.append(
            f"- `{name}`: {run['line']}, {run['parallel']}, {v.get('gpu', '?')}, torch {v.get('torch', '?')}, "
            f"sgl-deep-gemm {v.get('sgl-deep-gemm', '?')}, sglang-kernel {v.get('sglang-kernel', '?')}"
            f"{_GATE_SKIPPED if run.get('sgl_kernel_version_check_skipped') else ''}, "
            f"patches applied: {patches}{_command_suffix(run.get('command'))}"
        )
    lines += [
        "",
        "| next_n | requests | ctx | lengths | verify us pristine -> patched | x | pristine re-run | step ms pristine -> patched | x "
        "| indexer share of verify (pristine / patched) | tokens identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        aa = (r.get("aa_noise") or {}).get("verify")
        shares = [(r.get("indexer_share") or {}).get(k) for k in ("pristine", "patched")]
        share = " / ".join("-" if not x else f"{100 * x['share']:.0f}%" for x in shares)
        step = [r["pristine"].get("step_interval_ms"), r["patched"].get("step_interval_ms")]
        step_text = "-" if None in step else f"{step[0]:.2f} -> {step[1]:.2f}"
        lines.append(
            f"| {r['next_n']} | {r['batch_size']} | {r['ctx'] // 1024}k | {r['lengths']} | "
            f"{r['pristine']['verify_step_us']:.0f} -> {r['patched']['verify_step_us']:.0f} | {r['speedup_verify']:.3f} | "
            f"{'-' if aa is None else f'{aa:.3f}'} | {step_text} | "
            f"{'-' if r.get('speedup_step_interval') is None else format(r['speedup_step_interval'], '.3f')} | "
            f"{share} | {r['tokens_identical']} |"
        )
    return lines


def _patch_title(name: str) -> str:
    """A patch file's name without the series' own number and the suffix: `0002-DSA-Rows.patch` -> `DSA-Rows`."""
    return re.sub(r"^\d{4}-", "", name.removesuffix(".patch"))


def _run_patch(applied: dict, ours: list[Patch]) -> str:
    """A patch an engine run applied, as an upstream reader can place it: this PR's commit byte for byte, an
    earlier version of one (the same name, other bytes), or a patch this PR does not carry. The series' own
    numbers (0001, 0002) are left out: they mean nothing upstream, and a patch's number moves. The combined
    engine report (bench/engine/report.py) keeps a sha256's first 12 hex digits; a run's own JSON keeps it whole."""
    title = _patch_title(applied["name"])
    applied_hash = applied.get("sha256") or ""
    if len(applied_hash) >= 12 and any(sha256_hex(p.data).startswith(applied_hash) for p in ours):
        return f"`{title}` (this PR's commit)"
    if title in {_patch_title(p.name) for p in ours}:
        return f"`{title}` (an earlier version of this PR's commit)"
    return f"`{title}` (not in this PR)"


def _acceptance(rows: list[dict]) -> str:
    """How many drafts the cited rows accepted: sglang's simulated acceptance, or none (dummy weights)."""
    accepted = sorted({(r["simulated_acceptance"], r["next_n"]) for r in rows if r.get("simulated_acceptance")})
    parts = [f"drafts accepted at {a:g} of {n} through sglang's `SGLANG_SIMULATE_ACC_LEN`" for a, n in accepted]
    if any(not r.get("simulated_acceptance") for r in rows):
        parts.append("one token per step in rows without it: dummy weights accept no draft")
    return "; ".join(parts)


def _command_suffix(command: str | None) -> str:
    return f"; `{shown}`" if (shown := upstream_command(command)) else ""


def _indexer_step_table(data: dict) -> list[str]:
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
    if command := upstream_command(data.get("command")):
        lines += ["", f"Command: `{command}`"]
    return lines


def _kernel_table(data: dict) -> list[str]:
    rows = [r for r in data["rows"] if r["ctx"] == max(x["ctx"] for x in data["rows"])]
    lines = [
        f"Kernel only (no sglang code ran): `fp8_paged_mqa_logits` on **{data['device']}** (SM {data['sm']}), DeepGEMM {data['deep_gemm']}, "
        f"H={data['heads']}, D={data['head_dim']}, context {rows[0]['ctx'] // 1024}k, median of {data['reps']} "
        "CUDA-graph replays; per-token is upstream's SM90 path, chosen is the layout this PR selects "
        f"(per-token below batch {data.get('min_batch_size', '?')}).",
        "",
        *_speed_rows(rows, layout_key="chosen_layout"),
    ]
    if command := upstream_command(data.get("commands", {}).get("bench") or data.get("command")):
        lines += ["", f"Command: `{command}`"]
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
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FatalError(f"{path} is missing (named in patches/pr-groups.json)") from None
    except ValueError as exc:
        raise FatalError(f"{path} is not valid JSON ({exc})") from None


def _unwrap(text: str) -> str:
    return " ".join(text.split())


def _indent(text: str) -> str:
    return "\n".join("   " + line if line.strip() else "" for line in text.splitlines())
