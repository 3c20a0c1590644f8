"""The PR tests' series: two small real patches on v0.5.14's global_config.py, in two PR groups
(the second stacked on the first), with the project's own trailers in their messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglpatch.project import PROJECT_ROOT
from testing.sglang_trees import SECOND, make_series

GROUPS = {
    "upstream": "sgl-project/sglang",
    "groups": [
        {
            "id": "base-group",
            "title": "[DSA] First group of the PR test series",
            "branch": "test-first-group",
            "accuracy": ["docs/results/gpu_ci_h200_for_tests.json"],
            "benchmark": "docs/results/paged_mqa_h200.json",
            "prior_art": [{"pr": 27166, "note": "the change this patch carries"}],
            "checklist": {},
        },
        {
            "id": "stacked-group",
            "title": "[Spec] Second group, stacked on the first",
            "branch": "test-stacked-group",
            "depends_on": ["base-group"],
            "prior_art": [{"pr": 29787, "note": "the change this patch carries"}],
            "checklist": {},
        },
    ],
}


def pr_series(
    base_repo,
    tmp_path,
    pin,
    name,
    first_line="VERBOSE_DEFAULT = 0",
    extra_import="",
    subject="[DSA] Add a verbosity default",
    why="the first group needs a change.",
    groups: dict = GROUPS,
) -> Path:
    """Two patches in two PR groups (GROUPS, written as UTF-8 the way an editor writes it)."""
    first = (
        f"{subject}\n\nWhy: {why}\n\nWhat: one constant.\n\n"
        "Drop when: never.\n\nUpstream-PR: 27166\nPatch-Group: base-group\n"
        "Drop-When: never\nTests: tests/toolkit/test_pr.py\n"
    )
    second = (
        "[Spec] Use the verbosity default\n\nWhy: builds on the first group.\n\nWhat: reads the constant.\n\n"
        "Drop when: never.\n\nUpstream-PR: 29787\nPatch-Group: stacked-group\nDrop-When: never\n"
    )
    patches = make_series(
        base_repo,
        tmp_path / f"dev-{name}",
        tmp_path / name,
        pin,
        [
            (first, [(SECOND, "class GlobalConfig:", f"{extra_import}{first_line}\n\n\nclass GlobalConfig:")]),
            (second, [(SECOND, "self.verbosity = 0", "self.verbosity = VERBOSE_DEFAULT")]),
        ],
    )
    (patches / "pr-groups.json").write_text(json.dumps(groups, ensure_ascii=False), encoding="utf-8")
    return patches


@pytest.fixture
def line_project(tmp_path, base_repo, project_pin, monkeypatch):
    """A project whose one line (v0.5.14) is the PR test series; its build/ is in tmp_path."""
    root = tmp_path / "project"
    line = root / "patches" / "v0.5.14"
    shutil.copytree(pr_series(base_repo, tmp_path, project_pin, "series"), line)
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    return line


@pytest.fixture
def pr_project(tmp_path, monkeypatch):
    """The project folder the bodies are made from: the committed H200 benchmark and a real H200 GPU leg summary,
    where GROUPS cites them."""
    results = tmp_path / "project" / "docs" / "results"
    results.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "docs" / "results" / "paged_mqa_h200.json", results)
    shutil.copy(PROJECT_ROOT / "docs" / "ci" / "gpu-leg-h100-on-h200.json", results / "gpu_ci_h200_for_tests.json")
    monkeypatch.setattr("sglpatch.commands.pr.PROJECT_ROOT", tmp_path / "project")
    return tmp_path / "project"
