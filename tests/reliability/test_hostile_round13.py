"""The hostile trial of round 13: what round 12 left untried (`clean` and the reflog), the user's shell
environment around the toolkit, and more (docs/reliability.md, round 13).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sglpatch.git import Git, init_repo
from testing.killed_cli import cli_child, point_after, python_child
from testing.sglang_trees import (
    BACKEND,
    SECOND,
    TESTER_IDENTITY,
    as_tester,
    one_patch_series,
    stopped_at_a_conflict,
    upstream_branches,
)
from testing.tree_bytes import refused, tree_state


def _default_base(series_project, base_repo):
    """build/sglang as sglpatch lays it out: a clone of the release."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    return where


@pytest.mark.parametrize("left", ["reset away", "detached and left"])
def test_clean_keeps_a_commit_of_the_users_that_only_the_reflog_holds(sglpatch, series_project, base_repo, left):
    """A commit the user made in build/sglang and then left (a `git reset --hard HEAD~1`, or a commit on a
    detached HEAD they switched away from): no ref holds it, only the reflog, which is how the user gets it back.
    clean looked at refs alone: the checkout went with it, exit 0. Now it is named and nothing is deleted."""
    where = _default_base(series_project, base_repo)
    git = as_tester(Git(where))
    if left == "detached and left":
        git.run("checkout", "-q", "--detach")
    (where / BACKEND).write_text("my work\n")
    git.run("commit", "-q", "-am", "My work I left")
    git.run("checkout", "-q", "main") if left == "detached and left" else git.run("reset", "-q", "--hard", "HEAD~1")
    err = refused(sglpatch, series_project, command="clean")
    assert "only the reflog holds, the last" in err and "My work I left" in err, err
    assert "nothing was deleted" in err, err


def test_clean_still_deletes_a_default_base_sglpatch_applied_and_reverted(sglpatch, series_project, monkeypatch):
    """The guard above reads the commits `git commit` made: apply's and revert's switches, logged in the same
    reflog (the series' commits by the user's committer), are sglpatch's, and clean deletes build/ after them."""
    for key, value in TESTER_IDENTITY.items():
        monkeypatch.setenv(key, value)
    assert sglpatch("apply")[0] == 0
    assert sglpatch("revert")[0] == 0
    code, out, err = sglpatch("clean")
    assert code == 0 and not (series_project / "build").exists(), (out, err)


# -- the user's shell: git's environment variables that no round had set ---------------------------------


def _rebase_args(checkout, patches, report, onto) -> tuple:
    return ("--sglang", checkout, "--patches", patches, "--report-dir", report, "--onto", onto, "--release", "0.5.14")


def _series_files(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("opts", ["--unified=0", "-u7"])
def test_export_and_rebase_write_the_series_format_whatever_git_diff_opts_says(
    sglpatch, checkout, patches, tmp_path, monkeypatch, opts
):
    """`GIT_DIFF_OPTS` in the user's shell (git's own variable for the context of its diffs: `-u7` for more) beat
    format-patch's `--unified=3` on the command line: a rebase (and `export`) wrote every patch with that context,
    the whole series rewritten ("rebased", exit 0), with `--unified=0` patches of no context at all. Now the
    variable is not passed to the toolkit's git: the series is the same bytes."""
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = _series_files(patches)
    monkeypatch.setenv("GIT_DIFF_OPTS", opts)
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert _series_files(patches) == before


def test_a_rebase_checks_that_each_patch_compiles_under_git_literal_pathspecs(
    sglpatch, checkout, base_repo, project_pin, tmp_path, monkeypatch
):
    """`GIT_LITERAL_PATHSPECS=1` in the user's shell (set to keep git from globbing file names): the rebase's
    check that each patch still byte-compiles lists the `*.py` files it touched with a pathspec `*.py`, which then
    matched no file: a patch that does not compile was "rebased", exit 0. Now the check sees the file."""
    message = "[Spec] Break the syntax\n\nWhy: check test.\n\nUpstream-PR: 1\n"
    broken = (SECOND, "class GlobalConfig", "class GlobalConfig(:\nclass _Unused")
    patches = one_patch_series(base_repo, project_pin, tmp_path / "broken", message, broken)
    upstream_branches(checkout, quiet=True)
    monkeypatch.setenv("GIT_LITERAL_PATHSPECS", "1")
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 1 and "does not compile" in err, (out, err)


# -- interrupted runs at points no round had cut -----------------------------------------------------------


def test_an_abort_killed_after_its_switch_back_and_run_again_keeps_no_commits_that_were_never_made(
    sglpatch, checkout, patches, tmp_path
):
    """`rebase --abort` of a stopped rebase, killed right after its `git checkout -f` back to the original branch
    (a closed terminal, an OOM kill), then `--abort` again as the stopped rebase asks: the second took HEAD, now
    the original branch's tip, for commits the user made while the rebase waited, wrote a ref
    `refs/sglpatch/backup/aborted-*` for it and said "the commits made while it waited are kept at ...", where
    the user had made none. Now the original branch's own commits are not taken for the user's."""
    report = tmp_path / "report"
    stopped_at_a_conflict(sglpatch, checkout, patches, report)
    saved = tmp_path / "saved"
    subprocess.run(["cp", "-a", str(checkout), str(saved)], check=True)
    abort = ["rebase", "--sglang", checkout, "--patches", patches, "--report-dir", report, "--abort"]
    trace = tmp_path / "trace"
    assert cli_child(*abort, SGLPATCH_FAULT_TRACE=trace).returncode == 0
    aborted = tree_state(checkout)
    shutil.rmtree(checkout)
    subprocess.run(["cp", "-a", str(saved), str(checkout)], check=True)
    point = point_after(trace, "rebase rollback: back on the original branch")
    assert cli_child(*abort, SGLPATCH_FAULT_AT=point, SGLPATCH_FAULT_SIGNAL="KILL").returncode == -9
    again = cli_child(*abort)
    assert again.returncode == 0 and "made while it waited" not in again.stdout, (again.stdout, again.stderr)
    assert tree_state(checkout) == aborted


def test_a_package_folder_inside_a_checkout_is_refused_whatever_git_ceiling_directories_says(
    sglpatch, checkout, patches, monkeypatch
):
    """`GIT_CEILING_DIRECTORIES` in the user's shell naming their checkout (set so that git does not look above
    the folders under it), and `--sglang CHECKOUT/python/sglang` (where an editable install points): apply asked
    git whether a checkout tracks that folder, git did not look, and the folder was patched in place as a package,
    the checkout's tracked files rewritten behind git and a journal folder left in it, exit 0. Now it is refused as
    without the variable, pointing to the checkout."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(checkout))
    err = refused(sglpatch, checkout, "--sglang", checkout / "python" / "sglang", "--patches", patches)
    assert "is tracked by the git checkout" in err, err


# the child that asks the check of a rebase killed inside its git (round 10's case) about a checkout, under the
# locale it is given
_KILLED_REBASE_CHECK = """
import sys
from types import SimpleNamespace
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.targets import checkout_at
from sglpatch.targets.killed_git import _refuse_unexplained_changes

root = sys.argv[1]
head = Git(root).run("rev-parse", "HEAD")
rebase = SimpleNamespace(phase="replaying", onto=head, original_head=head, commits=[], next=None)
state = SimpleNamespace(target=checkout_at(__import__("pathlib").Path(root)), rebase=rebase,
                        locks=(SimpleNamespace(ours=True),))
try:
    _refuse_unexplained_changes(state)
except FatalError as refusal:
    sys.exit(f"{sys.getfilesystemencoding()} refused: {refusal}")
print(sys.getfilesystemencoding(), "rolls back")
"""


def test_an_edit_in_a_file_past_ascii_stops_the_roll_back_of_a_killed_rebase_under_a_latin1_locale(tmp_path):
    """Round 10's case (a rebase killed inside its git, then an edit in `café.py`, then `recover`) under a locale
    that is not UTF-8 (`LC_ALL=de_DE.ISO-8859-1`, which Python takes for its file names): the names git listed
    were decoded as UTF-8, so Python looked for `caf\\xe9.py`, no file, and took the edit for none: the roll
    back's `git checkout -f` would throw it away. Now the names are decoded as Python decodes file names."""
    locales = tmp_path / "locales"
    locales.mkdir()
    made = subprocess.run(
        ["localedef", "-i", "de_DE", "-f", "ISO-8859-1", str(locales / "de_DE.ISO-8859-1")], capture_output=True
    )
    if made.returncode not in (0, 1) or not (locales / "de_DE.ISO-8859-1").exists():
        pytest.skip(f"no ISO-8859-1 locale can be made here: {made.stderr.decode(errors='replace')}")
    root = tmp_path / "checkout"
    git = as_tester(init_repo(root))
    (root / "café.py").write_text("x = 1\n")
    git.run("add", "-A")
    git.run("commit", "-q", "-m", "mine")
    (root / "café.py").write_text("x = 2  # my edit\n")
    child = python_child("-c", _KILLED_REBASE_CHECK, root, LOCPATH=locales, LC_ALL="de_DE.ISO-8859-1")
    assert child.returncode == 1 and "iso8859-1 refused" in child.stderr, (child.stdout, child.stderr)
