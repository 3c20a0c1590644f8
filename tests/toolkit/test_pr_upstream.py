"""`sglpatch pr` against upstream's history, on real git and without the network.

The stand-in for sgl-project/sglang is a local bare repository with a history: a root
commit, the real v0.5.14 tree (from the wheel, as testing/sglang_trees.py builds it) as an
ordinary commit tagged v0.5.14, then main moving on: a commit to unrelated files, one to a
file the test series touches (away from its hunks), one adding a file. The user's clone is
a `git clone` of it; the fork is a bare clone of it. GitHub's CLI cannot run here, so `gh`
is a stand-in on PATH (STAND_IN_GH) that records each call's arguments.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from sglpatch.git import Git, init_repo
from sglpatch.rebase.releases import BASE_IDENTITY, imported_release
from sglpatch.series import parse_patch
from sglpatch.upstream.pr_branch import upstream_message
from testing.pr_series import pr_series
from testing.sglang_trees import SECOND, as_tester, replace_in, user_clone

pytestmark = pytest.mark.usefixtures("pr_project")
UPSTREAM_AUTHOR = ("Sam Upstream", "sam@example.org")
PROJECT_TRAILERS = (
    "Patch-Group:",
    "Drop-When:",
    "Tests:",
    "Extends-PR:",
    "Upstream-PR:",
    "Upstream-Marker:",
    "Prior-Art:",
)

STAND_IN_GH = '''#!{python}
"""Stands in for GitHub's CLI (`gh`), which cannot reach GitHub from the tests: records each call's
arguments as one JSON list per line in {log}, and answers `auth status`, `pr create` and `pr edit`."""
import json
import sys

with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
verb = " ".join(sys.argv[1:3])
if verb == "auth status":
    sys.exit(0)
if verb == "pr create":
    print("https://github.com/sgl-project/sglang/pull/31337")
elif verb == "pr edit":
    print("https://github.com/sgl-project/sglang/pull/" + sys.argv[3])
else:
    sys.exit(1)
'''


def _commit(repo: Git, message: str) -> str:
    name, email = UPSTREAM_AUTHOR
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name}
    repo.run("add", "-A")
    repo.with_env(**env, GIT_COMMITTER_EMAIL=email).run_with_input(["commit", "-q", "-F", "-"], message.encode())
    return repo.run("rev-parse", "HEAD")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory, base_repo):
    root = tmp_path_factory.mktemp("upstream")
    dev = root / "dev"
    repo = init_repo(dev)
    (dev / "README.md").write_text("# sglang\n")
    _commit(repo, "Initial commit")
    shutil.copytree(base_repo / "python", dev / "python")
    _commit(repo, "Release v0.5.14 (#29000)")
    repo.run("tag", "v0.5.14")
    (dev / "docs").mkdir()
    (dev / "docs" / "release_notes.md").write_text("# Release notes\n\nv0.5.14: DSA fixes.\n")
    _commit(repo, "[Docs] Release notes (#30001)")
    replace_in(
        dev / SECOND,
        "self.enable_parallel_encoding = True\n",
        "self.enable_parallel_encoding = True\n        self.enable_frontend_cache = False\n",
    )
    _commit(repo, "[Frontend] A cache switch in the global config (#30002)")
    (dev / "python" / "sglang" / "srt" / "upstream_helper.py").write_text('"""A new upstream module."""\n')
    _commit(repo, "[Misc] Add a helper module (#30003)")
    bare = root / "upstream.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(dev), str(bare)], check=True)
    return bare


@pytest.fixture
def clone(tmp_path, upstream):
    return user_clone(upstream, tmp_path / "clone", ("Pat Contributor", "pat@example.com"))


@pytest.fixture
def fork(tmp_path, upstream):
    dest = tmp_path / "fork.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(upstream), str(dest)], check=True)
    return dest


@pytest.fixture
def gh_calls(tmp_path, monkeypatch):
    """The stand-in `gh` on PATH; returns a function that reads the calls it recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh-calls.jsonl"
    (bin_dir / "gh").write_text(STAND_IN_GH.format(python=sys.executable, log=str(log)))
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{subprocess.os.environ['PATH']}")
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _refs(repo) -> str:
    return Git(repo).run("for-each-ref", "--format=%(objectname) %(refname)")


def pr(sglpatch, clone, patches, tmp_path, *args):
    return sglpatch("pr", "--sglang", clone, "--patches", patches, "--out", tmp_path / "bodies", *args)


def _submit(sglpatch, clone, patches, tmp_path, fork, *args):
    return pr(sglpatch, clone, patches, tmp_path, "--fork", fork, "--fork-owner", "alice", "--submit", *args)


def test_submit_builds_on_upstream_main_pushes_to_the_fork_and_opens_prs(
    sglpatch, clone, upstream, fork, tmp_path, base_repo, project_pin, gh_calls
):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    code, out, err = _submit(sglpatch, clone, patches, tmp_path, fork)
    assert code == 0, err
    main = Git(upstream).run("rev-parse", "main")
    assert "on origin/main" in out and "cannot be submitted" not in out
    assert out.count("-Add-a-verbosity-default.patch: clean") == 1, out  # the patch report, as make rebase prints it
    fork_git = Git(fork)
    first, stacked = "refs/heads/test-first-group", "refs/heads/test-stacked-group"
    assert fork_git.run("merge-base", first, "main") == main  # upstream's main, not the release
    assert fork_git.run("rev-list", "--count", f"main..{first}") == "1"
    assert fork_git.run("merge-base", stacked, first) == fork_git.run("rev-parse", first)
    messages = fork_git.run("log", "--format=%B%x00", f"main..{stacked}")
    assert "Why: the first group needs a change." in messages and "What: reads the constant." in messages
    assert not [t for t in PROJECT_TRAILERS if t in messages] and "Drop when:" not in messages
    assert fork_git.run("log", "-1", "--format=%an|%cn", first) == "Ada Patchwright|Pat Contributor"
    creates = [call for call in gh_calls() if call[:2] == ["pr", "create"]]
    assert [c[c.index("--head") + 1] for c in creates] == ["alice:test-first-group", "alice:test-stacked-group"]
    for call in creates:
        assert call[call.index("--base") + 1] == "main" and call[call.index("--repo") + 1] == "sgl-project/sglang"
    assert Git(clone).rev_parse("refs/sglpatch/pushed/test-first-group") == fork_git.rev_parse(first)


def test_submit_on_an_imported_base_refuses_and_pushes_nothing(
    sglpatch, checkout, fork, tmp_path, base_repo, project_pin, gh_calls
):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    fork_refs, checkout_refs = _refs(fork), _refs(checkout)
    code, out, err = _submit(sglpatch, checkout, patches, tmp_path, fork)
    assert code == 2 and err.count("\n") == 1, err
    assert "--submit needs a base with upstream's history" in err and "imported from its PyPI wheel" in err
    assert "SGLANG=<clone> ONTO=origin/main" in err and "nothing was pushed" in err
    assert _refs(fork) == fork_refs and _refs(checkout) == checkout_refs and gh_calls() == []
    assert not (tmp_path / "bodies").exists()


def test_submit_without_a_clone_refuses_before_building_the_default_base(sglpatch, line_project, tmp_path):
    code, out, err = sglpatch("pr", "--submit", "--fork", "https://github.com/alice/sglang", "--out", tmp_path / "b")
    assert code == 2 and err.count("\n") == 1 and "the line's default base (v0.5.14)" in err, err
    assert not (line_project.parents[1] / "build").exists() and not (tmp_path / "b").exists()


def test_a_dry_run_on_the_imported_base_renders_bodies_and_says_in_one_line_it_cannot_be_submitted(
    sglpatch, checkout, tmp_path, base_repo, project_pin
):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    code, out, err = pr(sglpatch, checkout, patches, tmp_path)
    assert code == 0, err
    [note] = [line for line in out.splitlines() if "cannot be submitted" in line]
    assert "imported from its PyPI wheel" in note and "make pr SGLANG=<clone> ONTO=origin/main" in note
    assert (tmp_path / "bodies" / "base-group.md").is_file()


def test_a_conflict_on_the_base_stops_with_the_hunk_and_leaves_no_branch_or_ref(
    sglpatch, clone, tmp_path, base_repo, project_pin
):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    replace_in(clone / SECOND, "self.verbosity = 0", "self.verbosity = 2")
    _commit(Git(clone), "[Frontend] Louder by default (#30004)")
    refs = _refs(clone)
    code, out, err = pr(sglpatch, clone, patches, tmp_path, "--onto", "main")
    assert code == 2 and err.count("\n") == 1, err
    assert "-Use-the-verbosity-default.patch conflicts on main: python/sglang/global_config.py, hunk #1 @@" in err
    assert "no branch was made" in err and "make rebase SGLANG=<clone> ONTO=main" in err
    assert "-Add-a-verbosity-default.patch: clean" in out  # the group before it was carried, and not written
    assert _refs(clone) == refs and not (tmp_path / "bodies").exists()


def test_an_update_force_pushes_and_prints_the_range_diff_against_what_was_pushed(
    sglpatch, clone, fork, tmp_path, base_repo, project_pin, gh_calls
):
    first = pr_series(base_repo, tmp_path, project_pin, "v1")
    assert _submit(sglpatch, clone, first, tmp_path, fork)[0] == 0
    pushed = Git(fork).rev_parse("refs/heads/test-first-group")
    (clone / "NOTES.md").write_text("main moved on\n")
    _commit(Git(clone), "[Docs] Notes (#30005)")  # upstream's main moved between the two versions
    second = pr_series(base_repo, tmp_path, project_pin, "v2", first_line="VERBOSE_DEFAULT = 1")
    code, out, err = _submit(sglpatch, clone, second, tmp_path, fork, "--onto", "main", "--group", "base-group")
    assert code == 0, err
    now = Git(fork).rev_parse("refs/heads/test-first-group")
    assert now != pushed and not Git(fork).is_ancestor(pushed, now)  # forced
    assert Git(fork).run("merge-base", now, "main") != Git(clone).rev_parse("main")  # fork's main is as it was
    assert Git(clone).run("merge-base", now, "main") == Git(clone).rev_parse("main")
    assert f"changed since pushed ({pushed[:12]})" in out, out
    assert "-+VERBOSE_DEFAULT = 0" in out and "++VERBOSE_DEFAULT = 1" in out  # git range-diff's lines
    edits = [call for call in gh_calls() if call[:2] == ["pr", "edit"]]
    assert edits and edits[-1][2] == "31337" and "  running: gh pr edit 31337 --repo sgl-project/sglang" in out
    body = (tmp_path / "bodies" / "base-group.md").read_text()
    assert "### Changes since the version pushed before" in body and "++VERBOSE_DEFAULT = 1" in body


def test_a_fork_branch_moved_by_someone_else_is_not_overwritten(
    sglpatch, clone, fork, tmp_path, base_repo, project_pin, gh_calls
):
    first = pr_series(base_repo, tmp_path, project_pin, "v1")
    assert _submit(sglpatch, clone, first, tmp_path, fork)[0] == 0
    Git(fork).run("update-ref", "refs/heads/test-first-group", Git(fork).rev_parse("main"))  # pushed by someone else
    refs = _refs(fork)
    second = pr_series(base_repo, tmp_path, project_pin, "v2", first_line="VERBOSE_DEFAULT = 1")
    code, _, err = _submit(sglpatch, clone, second, tmp_path, fork, "--group", "base-group")
    assert code == 2 and err.count("\n") == 1 and "is not what make pr pushed before" in err, err
    assert _refs(fork) == refs


def test_submit_needs_the_fork_and_its_owner(sglpatch, clone, fork, tmp_path, base_repo, project_pin):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    refs = _refs(fork)
    code, _, err = pr(sglpatch, clone, patches, tmp_path, "--submit")
    assert code == 2 and "--submit needs --fork REMOTE" in err, err
    code, _, err = pr(sglpatch, clone, patches, tmp_path, "--fork", fork, "--submit")  # a path names no owner
    assert code == 2 and "FORK_OWNER=<your GitHub user>" in err and _refs(fork) == refs, err


def test_a_clone_without_the_release_tag_builds_on_the_wheels_release(sglpatch, line_project, upstream, tmp_path):
    dest = tmp_path / "no-tags"
    subprocess.run(["git", "clone", "-q", "--no-tags", str(upstream), str(dest)], check=True)
    code, out, err = sglpatch("pr", "--sglang", dest, "--out", tmp_path / "bodies")
    assert code == 0, err
    git = Git(dest)
    assert git.run("merge-base", "sglpatch-pr/test-first-group", "origin/main") == git.rev_parse("origin/main")
    assert git.run("tag") == "" and "cannot be submitted" not in out


def test_the_upstream_message_keeps_why_and_what_and_drops_what_only_the_series_needs(base_repo, project_pin, tmp_path):
    patches = pr_series(base_repo, tmp_path, project_pin, "series")
    [patch] = [parse_patch(p.name, p.read_bytes(), p) for p in sorted(patches.glob("0001-*.patch"))]
    patch.body += "\nSigned-off-by: Ada Patchwright <ada@example.com>"
    patch.trailers["signed-off-by"] = "Ada Patchwright <ada@example.com>"
    assert upstream_message(patch) == (
        "[DSA] Add a verbosity default\n\nWhy: the first group needs a change.\n\nWhat: one constant.\n\n"
        "Signed-off-by: Ada Patchwright <ada@example.com>\n"
    )


def test_an_imported_base_is_known_by_its_marker_and_an_older_import_by_its_identity(tmp_path, checkout, upstream):
    assert imported_release(Git(checkout), "HEAD") == "v0.5.14"  # made now: the Sglpatch-Import trailer
    assert "Sglpatch-Import: pypi-wheel" in Git(checkout).run("log", "-1", "--format=%B")
    assert imported_release(Git(upstream), "main") is None
    old = init_repo(tmp_path / "old")
    ident = {"GIT_AUTHOR_NAME": BASE_IDENTITY["name"], "GIT_AUTHOR_EMAIL": BASE_IDENTITY["email"]}
    ident.update(GIT_COMMITTER_NAME=BASE_IDENTITY["name"], GIT_COMMITTER_EMAIL=BASE_IDENTITY["email"])
    tree = old.run("write-tree")
    release = old.with_env(**ident).run_with_input(
        ["commit-tree", tree], b"sglang v0.5.9 from PyPI\n\nWheel: sglang-0.5.9.whl\n"
    )
    (tmp_path / "old" / "f").write_text("x\n")
    old.run("add", "f")
    on_top = _commit_tree_on(old, release)
    assert imported_release(old, on_top) == "v0.5.9"  # before the trailer existed: identity and subject
    stranger = as_tester(old).run_with_input(
        ["commit-tree", tree], b"sglang v0.5.9 from PyPI\n"
    )  # same subject, not ours
    assert imported_release(old, stranger) is None


def _commit_tree_on(repo: Git, parent: str) -> str:
    return as_tester(repo).run_with_input(["commit-tree", repo.run("write-tree"), "-p", parent], b"a change\n")
