"""`sglpatch pr` with real git on the wheel-imported base (a dry run: bodies, branches, what it would push),
a bare repo as the fork, bodies from the project's committed results. Against upstream's history, with
--submit: test_pr_upstream.py."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from sglpatch.git import Git, init_repo
from testing.pr_series import pr_series

pytestmark = pytest.mark.usefixtures("pr_project")


@pytest.fixture
def fork(tmp_path, checkout):
    bare = tmp_path / "fork.git"
    init_repo(bare, bare=True)
    Git(checkout).run("remote", "add", "myfork", str(bare))
    return bare


def pr(sglpatch, checkout, patches, tmp_path, *args):
    return sglpatch("pr", "--sglang", checkout, "--patches", patches, "--out", tmp_path / "bodies", *args)


def test_dry_run_builds_branches_and_bodies_and_sends_nothing(
    sglpatch, checkout, tmp_path, base_repo, project_pin, fork
):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
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
    main, appendix = body.split("<details><summary>Appendix</summary>")
    assert "| 2 | ragged | 32 |" in appendix and "| 2 | ragged | 32 |" not in main and "42 passed" in appendix
    assert "bench/" not in body and "docs/results" not in body  # a results file's project command is left out
    assert "(`global_config.py`)" in main  # Modifications names the file; the diff has its path
    stacked_body = (tmp_path / "bodies" / "stacked-group.md").read_text()
    assert "depends on [DSA] First group of the PR test series (the PR of branch `test-first-group`" in stacked_body
    assert "builds on this one" in body


def test_lint_failure_refuses_and_writes_no_branch(sglpatch, checkout, tmp_path, base_repo, project_pin, fork):
    patches = pr_series(base_repo, tmp_path, project_pin, "dirty", extra_import="import os\n")
    refs = Git(checkout).run("for-each-ref")
    code, _, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "myfork")
    assert code == 2 and "adds lint findings" in err and "F401" in err
    assert Git(fork).run("for-each-ref") == "" and Git(checkout).run("for-each-ref") == refs


def test_missing_fork_remote_is_a_clear_refusal(sglpatch, checkout, tmp_path, base_repo, project_pin):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    code, _, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "nosuchremote")
    assert code == 2 and "no remote named 'nosuchremote'" in err


def test_bodies_leak_no_token_home_or_local_path(sglpatch, checkout, tmp_path, base_repo, project_pin, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "x" * 36)
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    for body in (tmp_path / "bodies").glob("*.md"):
        text = body.read_text()
        assert "ghp_" not in text and "/work/" not in text and str(tmp_path) not in text


def test_dry_run_prints_the_push_and_the_head_it_would_use(sglpatch, checkout, tmp_path, base_repo, project_pin, fork):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    Git(checkout).run("remote", "add", "alice", "https://github.com/alice/sglang.git")
    code, out, err = pr(sglpatch, checkout, patches, tmp_path, "--fork", "alice")
    assert code == 0, err
    push = next(line for line in out.splitlines() if "it would push:" in line).split("it would push: ")[1]
    assert shlex.split(push)[3:] == [
        "push",
        "--force-with-lease=refs/heads/test-first-group:",  # the fork must not have it yet
        "-q",
        "alice",
        "sglpatch-pr/test-first-group:refs/heads/test-first-group",
    ]
    command = shlex.split(next(line for line in out.splitlines() if "gh pr create" in line).split("to open it: ")[1])
    assert command[command.index("--head") + 1] == "alice:test-first-group"
    code, out, err = pr(sglpatch, checkout, patches, tmp_path)
    assert code == 0 and "--head OWNER:test-first-group" in out and "FORK=<remote or URL>" in out, err
    assert Git(fork).run("for-each-ref") == ""  # a dry run pushes nothing


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
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0  # upstream = the series applied
    index = (Git(checkout).git_dir() / "index").read_bytes()
    code, out, err = pr(sglpatch, checkout, patches, tmp_path, "--onto", "sglpatch/v0.5.14")
    assert code == 0, err
    assert "base-group: no PR:" in out and "already upstream at" in out and "reverse-applies" in out
    assert Git(checkout).run("for-each-ref", "refs/heads/sglpatch-pr/") == ""
    assert (Git(checkout).git_dir() / "index").read_bytes() == index  # the checkout's index is not used


def test_a_body_edited_by_hand_is_not_written_over(sglpatch, checkout, tmp_path, base_repo, project_pin):
    """`pr --out DIR` wrote DIR/<group>.md over whatever was there: a body edited by hand (or a file of the user's of
    that name) was lost. A body pr wrote, as it was, is written again; another is refused before any branch moves."""
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    assert pr(sglpatch, checkout, patches, tmp_path)[0] == 0
    assert pr(sglpatch, checkout, patches, tmp_path)[0] == 0  # its own bodies, unchanged: written again
    body = tmp_path / "bodies" / "base-group.md"
    body.write_text(body.read_text() + "\nA paragraph of mine.\n")
    branches = Git(checkout).run("for-each-ref", "refs/heads")
    code, _, err = pr(sglpatch, checkout, patches, tmp_path)
    assert code == 2 and "base-group.md is not the body pr wrote" in err, err
    assert body.read_text().endswith("A paragraph of mine.\n")
    (move,) = re.findall(r"`(mv -n [^`]+)`", err)  # beside the body, where the user looks for it
    subprocess.run(["bash", "-c", move], check=True)
    assert (tmp_path / "bodies" / "base-group.md.mine").read_text().endswith("A paragraph of mine.\n")
    assert Git(checkout).run("for-each-ref", "refs/heads") == branches
