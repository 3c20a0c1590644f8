"""`sglpatch pr` with real git: a bare repo as the fork, bodies from the project's committed results.

`gh` is the one stand-in: a script on PATH that records its arguments and answers
like the GitHub CLI, because the GitHub API cannot be reached from here.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from sglpatch.git import Git, init_repo
from sglpatch.project import PROJECT_ROOT
from testing.sglang_trees import SECOND, make_series

FAKE_GH = """#!/bin/sh
# Stand-in for the GitHub CLI: records each call, answers like `gh`.
echo "$@" >> "{log}"
case "$1 $2" in
  "auth status") exit 0 ;;
  "pr create") echo "https://github.com/sgl-project/sglang/pull/31337" ;;
  "pr edit") echo "https://github.com/sgl-project/sglang/pull/$3" ;;
  *) exit 1 ;;
esac
"""

GROUPS = {
    "upstream": "sgl-project/sglang",
    "groups": [
        {
            "id": "base-group",
            "title": "[DSA] First group of the PR test series",
            "branch": "test-first-group",
            "accuracy": ["docs/results/gpu_ci_h200_for_tests.json"],
            "benchmark": "docs/results/paged_mqa_h200.json",
        },
        {
            "id": "stacked-group",
            "title": "[Spec] Second group, stacked on the first",
            "branch": "test-stacked-group",
            "depends_on": ["base-group"],
        },
    ],
}


def _series(base_repo, tmp_path, pin, name, first_line="VERBOSE_DEFAULT = 0", extra_import=""):
    first = (
        "[DSA] Add a verbosity default\n\nWhy: the first group needs a change.\n\nWhat: one constant.\n\n"
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
    (patches / "pr-groups.json").write_text(json.dumps(GROUPS))
    return patches


@pytest.fixture(autouse=True)
def ci_summary(tmp_path, monkeypatch):
    """A project folder for the bodies holding the committed H200 benchmark and a real H200 GPU leg summary."""
    results = tmp_path / "project" / "docs" / "results"
    results.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "docs" / "results" / "paged_mqa_h200.json", results)
    shutil.copy(PROJECT_ROOT / "docs" / "ci" / "gpu-leg-h100-on-h200.json", results / "gpu_ci_h200_for_tests.json")
    monkeypatch.setattr("sglpatch.commands.pr.PROJECT_ROOT", tmp_path / "project")


@pytest.fixture
def fork(tmp_path, checkout):
    bare = tmp_path / "fork.git"
    init_repo(bare, bare=True)
    Git(checkout).run("remote", "add", "myfork", str(bare))
    return bare


@pytest.fixture
def fake_gh(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh.log"
    (bin_dir / "gh").write_text(FAKE_GH.format(log=log))
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{subprocess.os.environ['PATH']}")
    return log


def pr(sglpatch, checkout, patches, tmp_path, *args):
    return sglpatch("pr", "--sglang", checkout, "--patches", patches, "--out", tmp_path / "bodies", *args)


def test_dry_run_builds_branches_and_bodies_and_sends_nothing(
    sglpatch, checkout, tmp_path, base_repo, project_pin, fork
):
    patches = _series(base_repo, tmp_path, project_pin, "series")
    code, out, err = pr(sglpatch, checkout, patches, tmp_path)
    assert code == 0, err
    git = Git(checkout)
    first = git.run("log", "--format=%an|%s", "v0.5.14..sglpatch-pr/test-first-group").splitlines()
    assert first == ["Ada Patchwright|[DSA] Add a verbosity default"]
    stacked = git.run("log", "--format=%s", "v0.5.14..sglpatch-pr/test-stacked-group").splitlines()
    assert stacked == ["[Spec] Use the verbosity default", "[DSA] Add a verbosity default"]
    assert Git(fork).run("for-each-ref") == ""  # nothing left the machine
    command = next(line for line in out.splitlines() if "gh pr create" in line).split("to open it: ")[1]
    assert shlex.split(command)[:4] == ["gh", "pr", "create", "--repo"]
    body = (tmp_path / "bodies" / "base-group.md").read_text()
    for section in (
        "## Motivation",
        "## Modifications",
        "## Accuracy Tests",
        "## Speed Tests and Profiling",
        "## Checklist",
    ):
        assert section in body
    assert "NVIDIA H200" in body and "test_paired_matches_per_token" in body and "42 passed" in body
    assert "| 2 | ragged | 32 |" in body and "bench/paged_mqa.py" in body
    assert "`python/sglang/global_config.py`" in body
    stacked_body = (tmp_path / "bodies" / "stacked-group.md").read_text()
    assert "depends on the `test-first-group` PR" in stacked_body
    assert "builds on this one" in body


def test_submit_pushes_to_the_fork_and_runs_gh(sglpatch, checkout, tmp_path, base_repo, project_pin, fork, fake_gh):
    patches = _series(base_repo, tmp_path, project_pin, "series")
    code, out, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "myfork", "--submit")
    assert code == 0, err
    heads = Git(fork).run("for-each-ref", "--format=%(refname)").splitlines()
    assert heads == ["refs/heads/test-first-group", "refs/heads/test-stacked-group"]
    calls = fake_gh.read_text().splitlines()
    assert [c.split()[:2] for c in calls if not c.startswith("auth")] == [["pr", "create"], ["pr", "create"]]
    assert "--title [DSA] First group of the PR test series" in calls[1]
    record = json.loads((Git(checkout).git_dir() / "sglpatch-prs.json").read_text())
    assert record["base-group"]["number"] == 31337


def test_update_adds_a_range_diff_and_uses_gh_pr_edit(
    sglpatch, checkout, tmp_path, base_repo, project_pin, fork, fake_gh
):
    first = _series(base_repo, tmp_path, project_pin, "v1")
    assert pr(sglpatch, checkout, first, tmp_path, "--fork", "myfork", "--submit")[0] == 0
    second = _series(base_repo, tmp_path, project_pin, "v2", first_line="VERBOSE_DEFAULT = 1")
    code, out, err = pr(sglpatch, checkout, second, tmp_path, "--fork", "myfork", "--submit", "--group", "base-group")
    assert code == 0, err
    assert any(c.startswith("pr edit 31337") for c in fake_gh.read_text().splitlines())
    body = (tmp_path / "bodies" / "base-group.md").read_text()
    assert "## Changes since the previous version" in body and "VERBOSE_DEFAULT = 1" in body


def test_lint_failure_refuses_to_push(sglpatch, checkout, tmp_path, base_repo, project_pin, fork):
    patches = _series(base_repo, tmp_path, project_pin, "dirty", extra_import="import os\n")
    code, _, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "myfork", "--submit")
    assert code == 2 and "adds lint findings" in err and "F401" in err
    assert Git(fork).run("for-each-ref") == ""


def test_missing_fork_remote_is_a_clear_refusal(sglpatch, checkout, tmp_path, base_repo, project_pin):
    patches = _series(base_repo, tmp_path, project_pin, "series")
    code, _, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "nosuchremote", "--submit")
    assert code == 2 and "no remote named 'nosuchremote'" in err
    code, _, err = pr(sglpatch, checkout, patches, tmp_path, "--submit")
    assert code == 2 and "--submit needs --fork REMOTE" in err


def test_bodies_leak_no_token_home_or_local_path(sglpatch, checkout, tmp_path, base_repo, project_pin, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    patches = _series(base_repo, tmp_path, project_pin, "series")
    assert pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    for body in (tmp_path / "bodies").glob("*.md"):
        text = body.read_text()
        assert "ghp_" not in text and "/work/" not in text and str(tmp_path) not in text


def test_dry_run_prints_the_push_and_the_head_it_would_use(sglpatch, checkout, tmp_path, base_repo, project_pin, fork):
    patches = _series(base_repo, tmp_path, project_pin, "series")
    Git(checkout).run("remote", "add", "alice", "https://github.com/alice/sglang.git")
    code, out, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "alice")
    assert code == 0, err
    push = next(line for line in out.splitlines() if "it would push:" in line).split("it would push: ")[1]
    assert shlex.split(push)[3:] == [
        "push",
        "--force-with-lease",
        "-q",
        "alice",
        "sglpatch-pr/test-first-group:refs/heads/test-first-group",
    ]
    command = shlex.split(next(line for line in out.splitlines() if "gh pr create" in line).split("to open it: ")[1])
    assert command[command.index("--head") + 1] == "alice:test-first-group"
    code, out, err = pr(sglpatch, checkout, patches, tmp_path)
    assert code == 0 and "--head OWNER:test-first-group" in out and "FORK=<remote or URL>" in out, err
    assert Git(fork).run("for-each-ref") == ""  # a dry run pushes nothing


@pytest.fixture
def line_project(tmp_path, base_repo, project_pin, monkeypatch):
    """A project whose one line (v0.5.14) is the PR test series; bodies from the ci_summary folder."""
    root = tmp_path / "project"
    line = root / "patches" / "v0.5.14"
    shutil.copytree(_series(base_repo, tmp_path, project_pin, "series"), line)
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    return line


def test_pr_builds_the_lines_default_base_when_missing(sglpatch, line_project, tmp_path):
    code, out, err = sglpatch("pr", "--out", tmp_path / "bodies")
    assert code == 0, err
    base = Git(line_project.parents[1] / "build" / "sglang")
    assert "line v0.5.14: 2 PR groups" in out
    assert base.run("log", "--format=%s", "v0.5.14..sglpatch-pr/test-first-group") == "[DSA] Add a verbosity default"
    # the default base has no git identity of its own, nor has the suite: the commits name sglpatch as committer
    assert base.run("log", "--format=%cn", "v0.5.14..sglpatch-pr/test-first-group") == "sglpatch"
    assert err.count("note: git has no identity here") == 1, err


def test_pr_prepares_nothing_for_a_backport_line_and_says_why(sglpatch, line_project, tmp_path):
    groups = json.loads((line_project / "pr-groups.json").read_text())
    groups["backport"] = "users pinned to sglang 0.5.14 carry it; upstream takes PRs against main"
    (line_project / "pr-groups.json").write_text(json.dumps(groups))
    code, out, err = sglpatch("pr", "--line", "v0.5.14", "--out", tmp_path / "bodies")
    assert code == 2 and err.count("\n") == 1, err
    assert "line v0.5.14 is a backport line, so it sends no PR upstream: users pinned to sglang 0.5.14" in err
    assert not (tmp_path / "bodies").exists() and not (line_project.parents[1] / "build").exists()


def test_no_pr_for_a_patch_the_line_records_as_upstream(sglpatch, line_project, checkout, tmp_path):
    first = next(p.name for p in line_project.glob("0001-*.patch"))
    record = {
        "patch": first,
        "upstream_pr": 27166,
        "release": "0.5.15",
        "now_in": ["python/sglang/global_config.py"],
        "note": "merged",
    }
    (line_project / "upstream.json").write_text(json.dumps([record]))
    code, out, err = sglpatch("pr", "--sglang", checkout, "--out", tmp_path / "bodies")
    assert code == 0, err
    assert f"base-group: no PR: {first} is upstream (#27166) since sglang 0.5.15, as upstream.json records" in out
    assert "stacked-group: no PR: it stacks on base-group, left out" in out
    assert Git(checkout).run("for-each-ref", "refs/heads/sglpatch-pr/") == ""
    assert not (tmp_path / "bodies" / "base-group.md").exists()


def test_no_pr_for_a_patch_the_upstream_ref_already_has(sglpatch, checkout, tmp_path, base_repo, project_pin):
    patches = _series(base_repo, tmp_path, project_pin, "series")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0  # upstream = the series applied
    index = (Git(checkout).git_dir() / "index").read_bytes()
    code, out, err = pr(sglpatch, checkout, patches, tmp_path, "--onto", "sglpatch/v0.5.14")
    assert code == 0, err
    assert "base-group: no PR:" in out and "already upstream at" in out and "reverse-applies" in out
    assert Git(checkout).run("for-each-ref", "refs/heads/sglpatch-pr/") == ""
    assert (Git(checkout).git_dir() / "index").read_bytes() == index  # the checkout's index is not used
