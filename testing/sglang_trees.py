"""Real sglang v0.5.14 trees from the cached PyPI wheel, in temp dirs, and the fixtures built on them.

The base repo is built once per test session from the wheel (the same code
`make apply` uses). The test series edits real v0.5.14 files, so the toolkit is
exercised on the real tree; it never stands in for the project's own series.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sglpatch import cli
from sglpatch.git import Git, init_repo
from sglpatch.lines import default_patch_dir
from sglpatch.pin import load_pin
from sglpatch.rebase.releases import check_out_release
from sglpatch.series_writer import render_series, write_series_files
from sglpatch.wheels import fetch_wheel
from testing.made_once import made_once
from testing.tree_bytes import tree_state

BACKEND = "python/sglang/srt/layers/attention/dsa_backend.py"
OVERLAP = "python/sglang/srt/managers/overlap_utils.py"
SECOND = "python/sglang/global_config.py"  # unchanged from 0.5.14 to 0.5.17
LATER = ("0.5.15", "0.5.16", "0.5.17")  # the releases `release_chain` holds after the pin
NEW_FILE = "python/sglang/srt/layers/attention/dsa/layout_note.py"
AUTHOR = ("Ada Patchwright", "ada@example.com")
# what a conftest takes with `from testing.sglang_trees import *`: the fixtures
__all__ = [
    "_clean_git_env",
    "_no_identity_config",
    "project_pin",
    "wheel_path",
    "base_repo",
    "series_dir",
    "checkout",
    "package",
    "patches",
    "series_project",
    "sglpatch",
    "release_chain",
    "chain",
]


# Who the tests' own commits are by (a series made for a test, an edit a test commits): always this identity,
# given on the call, as the suite runs the toolkit with no git identity (see _clean_git_env).
TESTER_IDENTITY = {
    "GIT_AUTHOR_NAME": AUTHOR[0],
    "GIT_AUTHOR_EMAIL": AUTHOR[1],
    "GIT_COMMITTER_NAME": AUTHOR[0],
    "GIT_COMMITTER_EMAIL": AUTHOR[1],
}


def as_tester(repo: Git) -> Git:
    """`repo` making a test's own commit (never the toolkit's): with the tests' fixed identity."""
    return repo.with_env(**TESTER_IDENTITY)


@pytest.fixture(scope="session")
def _no_identity_config(tmp_path_factory) -> Path:
    """A global git config that gives no identity, and keeps git from guessing one from the host name."""
    path = tmp_path_factory.mktemp("gitconfig") / "config"
    path.write_text("[user]\n\tuseConfigOnly = true\n")
    return path


@pytest.fixture(autouse=True)
def _clean_git_env(monkeypatch, _no_identity_config):
    """Every test runs as on a fresh machine: no system or global git config (so no identity: the toolkit
    must make its commits without one), no GIT_* variable from outside."""
    for var in [v for v in os.environ if v.startswith("GIT_")] + ["EMAIL"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(_no_identity_config))


@pytest.fixture(scope="session")
def project_pin():
    return load_pin(default_patch_dir())


@pytest.fixture(scope="session")
def wheel_path(project_pin):
    return fetch_wheel(project_pin.release, project_pin.wheel)


@pytest.fixture(scope="session")
def base_repo(tmp_path_factory, wheel_path, project_pin) -> Path:
    """The pinned release's wheel as a git repo, tagged: made once per run (testing/made_once.py), read-only."""

    def build(folder: Path) -> None:
        check_out_release(init_repo(folder / "sglang"), project_pin.release, wheel_path, date=project_pin.date)

    return made_once(tmp_path_factory, "base", build) / "sglang"


def _commit(repo: Git, message: str) -> None:
    dates = {"GIT_AUTHOR_DATE": "2026-07-01T12:00:00+00:00", "GIT_COMMITTER_DATE": "2026-07-01T12:00:00+00:00"}
    repo.run("add", "-A")
    as_tester(repo).with_env(**dates).run_with_input(["commit", "-q", "-F", "-"], message.encode())


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def upstream_branches(checkout: Path, quiet: bool = False) -> Git:
    """Branches of `checkout`'s main for a rebase to go onto: `newer`, whose edit of patch 1's line conflicts,
    and with `quiet` also `quiet`, which adds a file no patch touches. Back on main; the tester's git."""
    git = as_tester(Git(checkout))
    git.run("switch", "-q", "-c", "newer")
    replace_in(checkout / BACKEND, "class DSAIndexerMetadata", "class DSAIndexerMetadata  # upstream's\nclass _X")
    git.run("commit", "-q", "-am", "upstream edits the line patch 1 changes")
    if quiet:
        git.run("switch", "-q", "-c", "quiet", "main")
        (checkout / "UPSTREAM.txt").write_text("upstream\n")
        git.run("add", "UPSTREAM.txt")
        git.run("commit", "-q", "-m", "upstream adds a file")
    git.run("switch", "-q", "main")
    return git


def stopped_at_a_conflict(sglpatch, checkout: Path, patches: Path, report_dir: Path) -> Git:
    """The test series applied to `checkout`, then rebased onto a branch `newer` whose edit of patch 1's line
    conflicts: the rebase waits there. Returns the checkout's git, as the tester."""
    git = upstream_branches(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    code, out, err = sglpatch(
        "rebase", "--sglang", checkout, "--patches", patches, "--report-dir", report_dir, "--onto", "newer"
    )
    assert code == 1 and "conflicts in" in err, (out, err)
    return git


def apply_status_revert(sglpatch, checkout: Path, patches: Path) -> None:
    """Apply, status and revert each go through, and leave `checkout` as it was before."""
    before = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, (out, err)
    code, out, err = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert code == 0 and "the series is in" in out, (out, err)
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert tree_state(checkout) == before


def make_series(
    base_repo: Path, workdir: Path, out: Path, pin, commits: list[tuple[str, list[tuple[str, str, str]]]]
) -> Path:
    """Export a series made of `commits` [(message, [(path, old, new)])] on top of base_repo's pin tag.

    An `old` of None creates the file with `new` as its content. The clone at `workdir` is sparse: only the
    files the commits edit are checked out (the rest of the tree stays in git, and in every commit, as it is),
    which spares writing thousands of files per series; the commits, and so the series, are the same.
    """
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(base_repo), str(workdir)], check=True)
    repo = Git(workdir)
    edited = sorted({"/" + path for _, edits in commits for path, _, _ in edits})
    repo.run("sparse-checkout", "set", "--no-cone", *edited)
    repo.run("checkout", "-q")
    for message, edits in commits:
        for path, old, new in edits:
            if old is None:
                (workdir / path).parent.mkdir(parents=True, exist_ok=True)
                (workdir / path).write_text(new)
            else:
                replace_in(workdir / path, old, new)
        _commit(repo, message)
    out.mkdir(parents=True)
    (out / "pin.json").write_text(pin.to_json())
    write_series_files(out, render_series(repo, pin.tag, "HEAD", pin), replacing=[])
    return out


def one_patch_series(base_repo: Path, pin, out: Path, message: str, edit: tuple[str, str | None, str]) -> Path:
    """A series of one patch, `message`, making the one edit (path, old, new): made in a clone beside `out`."""
    return make_series(base_repo, out.parent / "dev", out, pin, [(message, [edit])])


@pytest.fixture(scope="session")
def series_dir(tmp_path_factory, base_repo, project_pin) -> Path:
    """Two small real patches against real v0.5.14 files, exported like the project's series."""
    first = (
        "[DSA] Mark the indexer metadata for the test series\n\nWhy: exercise the toolkit.\n\n"
        "What: one comment, one new file.\n\nUpstream-PR: 27166\nPatch-Group: test-group\n"
    )
    second = "[Spec] Mark the global config for the test series\n\nWhy: a second patch.\n\nUpstream-PR: 29787\n"
    commits = [
        (
            first,
            [
                (BACKEND, "class DSAIndexerMetadata", "# test series: first patch\nclass DSAIndexerMetadata"),
                (
                    NEW_FILE,
                    None,
                    '"""Added by the test series."""\n\nLAYOUTS = ("per_token", "native", "paired")\n',
                ),
            ],
        ),
        (second, [(SECOND, "class GlobalConfig", "# test series: second patch\nclass GlobalConfig")]),
    ]
    built = made_once(
        tmp_path_factory,
        "series",
        lambda tmp: make_series(base_repo, tmp / "dev", tmp / "patches", project_pin, commits),
    )
    return built / "patches"


def user_clone(source: Path, dest: Path, user: tuple[str, str] = ("Target User", "target@example.com")) -> Path:
    """A `git clone` of `source` at `dest` whose own config names its user."""
    subprocess.run(["git", "clone", "-q", str(source), str(dest)], check=True)
    Git(dest).run("config", "user.name", user[0])
    Git(dest).run("config", "user.email", user[1])
    return dest


@pytest.fixture
def checkout(tmp_path, base_repo) -> Path:
    return user_clone(base_repo, tmp_path / "checkout")


def copy_package(base_repo: Path, dest: Path) -> Path:
    """The base's package folder copied to `dest` (modes and times kept): `cp -a`, several times faster than
    shutil.copytree on its 3,200 files."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(base_repo / "python" / "sglang"), str(dest)], check=True)
    return dest


@pytest.fixture
def package(tmp_path, base_repo) -> Path:
    return copy_package(base_repo, tmp_path / "site-packages" / "sglang")


@pytest.fixture
def series_project(tmp_path, series_dir, monkeypatch) -> Path:
    """A project whose default line is the test series, its build/ (the default bases) under tmp_path."""
    root = tmp_path / "project"
    shutil.copytree(series_dir, root / "patches" / "v0.5.14")
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    return root


@pytest.fixture
def patches(tmp_path, series_dir) -> Path:
    """A private copy of the test series that a test may damage."""
    dest = tmp_path / "patches"
    shutil.copytree(series_dir, dest)
    return dest


@pytest.fixture
def sglpatch(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str):
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def release_chain(tmp_path_factory, wheel_path, project_pin):
    """A repo where each release is a commit on top of the previous one, tagged v<release> (0.5.15 to 0.5.17 from
    PyPI unless cached: tests that use it are marked `network`). Made once per run (testing/made_once.py), read-only.
    """

    def build(folder: Path) -> None:
        repo = init_repo(folder / "sglang")
        check_out_release(repo, project_pin.release, wheel_path, date=project_pin.date)
        for release in LATER:
            check_out_release(repo, release, fetch_wheel(release), date=project_pin.date)

    return made_once(tmp_path_factory, "chain", build) / "sglang"


@pytest.fixture
def chain(tmp_path, release_chain):
    """A clone of the release chain on a branch `work` at v0.5.14, with its user's identity."""
    dest = tmp_path / "chain"
    # --no-checkout: the one checkout is of v0.5.14 (not the newest release first, then v0.5.14)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(release_chain), str(dest)], check=True)
    git = Git(dest)
    git.run("checkout", "-q", "-b", "work", "v0.5.14")
    git.run("config", "user.name", "Target User")
    git.run("config", "user.email", "target@example.com")
    return dest


def changed_line(release_chain, path):
    """A line of `path` that upstream rewrote between v0.5.14 and v0.5.15: editing it must conflict."""
    git = Git(release_chain)
    old = git.run("show", f"v0.5.14:{path}", strip=False).splitlines()
    new = git.run("show", f"v0.5.15:{path}", strip=False).splitlines()
    for tag, i1, _i2, _, _ in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "replace" and old[i1].strip() and old.count(old[i1]) == 1:
            return old[i1]
    raise AssertionError(f"no rewritten line found in {path}")
