"""The hostile trial of round 14: what round 13 left untried (the listings still decoded as UTF-8 under a locale
that is not, kills of `rebase --abort` inside its git, the user's git variables) and the user's git settings for
`git apply` and format-patch (docs/reliability.md, round 14).
"""

from __future__ import annotations

import subprocess

import pytest

from sglpatch.git import Git
from testing import git_cut, sglang_trees
from testing.killed_cli import cli_child
from testing.sglang_trees import SECOND, as_tester, one_patch_series, stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import refused, tree_state

LATIN1 = "de_DE.ISO-8859-1"
PAST_ASCII = "python/sglang/café.py"


def _latin1_locale(tmp_path) -> dict[str, str]:
    """The environment of a shell under an ISO-8859-1 locale (made with localedef into a folder of the test's,
    as round 13 did), in which Python takes file names for ISO-8859-1."""
    locales = tmp_path / "locales"
    locales.mkdir()
    made = subprocess.run(["localedef", "-i", "de_DE", "-f", "ISO-8859-1", str(locales / LATIN1)], capture_output=True)
    if made.returncode not in (0, 1) or not (locales / LATIN1).exists():
        pytest.skip(f"no ISO-8859-1 locale can be made here: {made.stderr.decode(errors='replace')}")
    return {"LOCPATH": str(locales), "LC_ALL": LATIN1}


def _default_base_with_a_name_past_ascii(series_project, base_repo):
    """build/sglang as sglpatch lays it out, from a release whose tree holds `café.py` (the release commit, by
    sglpatch's identity, amended to hold it: no commit of the user's)."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    (where / PAST_ASCII).write_text("x = 1\n")
    git = Git(where).as_sglpatch()
    git.run("add", PAST_ASCII)
    git.run("commit", "-q", "--amend", "--no-edit")
    return where


def test_clean_keeps_a_skip_worktree_edit_in_a_name_past_ascii_under_a_latin1_locale(
    series_project, base_repo, tmp_path
):
    """build/sglang with an edit to `café.py`, marked `--skip-worktree` (round 12's case), and `make clean` from a
    shell under `LC_ALL=de_DE.ISO-8859-1`: clean listed the marked files with `ls-files -s -z` decoded as UTF-8,
    so Python looked for `caf\\xe9.py`, found no file and took it for one a sparse checkout left out: the checkout
    was deleted with the edit, exit 0. Now the names are decoded as Python decodes file names: refused."""
    where = _default_base_with_a_name_past_ascii(series_project, base_repo)
    Git(where).run("update-index", "--skip-worktree", PAST_ASCII)
    (where / PAST_ASCII).write_text("x = 2  # my edit\n")
    child = cli_child("clean", SGLPATCH_PROJECT=series_project, **_latin1_locale(tmp_path))
    assert child.returncode == 2 and "holds edits to python/sglang/caf" in child.stderr, (child.stdout, child.stderr)
    assert (where / PAST_ASCII).read_text() == "x = 2  # my edit\n"


def _series_files(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _rebase_args(checkout, patches, report, onto) -> tuple:
    return ("--sglang", checkout, "--patches", patches, "--report-dir", report, "--onto", onto, "--release", "0.5.14")


def test_a_rebase_onto_a_release_adding_a_name_past_ascii_keeps_the_users_ignored_file_there_under_latin1(
    sglpatch, checkout, patches, tmp_path
):
    """ONTO adds `café.py`, where the user keeps a file of their own that git ignores (`.git/info/exclude`), and
    the rebase runs from a shell under `LC_ALL=de_DE.ISO-8859-1`. Its check for files in the way of ONTO decoded
    `git diff --name-only -z` as UTF-8 and looked for `caf\\xe9.py`: no file, so the checkout of ONTO wrote over the
    user's file, "rebased", exit 0. Now the names are decoded as Python decodes file names: refused, nothing
    changed."""
    git = as_tester(Git(checkout))
    git.run("switch", "-q", "-c", "adds")
    (checkout / PAST_ASCII).write_text("upstream = 1\n")
    git.run("add", PAST_ASCII)
    git.run("commit", "-q", "-m", "upstream adds a file past ASCII")
    git.run("switch", "-q", "main")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    with open(checkout / ".git" / "info" / "exclude", "a", encoding="utf-8") as exclude:
        exclude.write("café.py\n")
    (checkout / PAST_ASCII).write_text("mine = 1\n")
    before = tree_state(checkout)
    child = cli_child(
        "rebase", *_rebase_args(checkout, patches, tmp_path / "report", "adds"), **_latin1_locale(tmp_path)
    )
    assert child.returncode == 2 and "is there already" in child.stderr, (child.stdout, child.stderr)
    assert tree_state(checkout) == before


# -- the user's git configuration for `git apply` ------------------------------------------------------------

_SPACES = 'NOTE = """two spaces at the end:  \n"""'


def _series_of_trailing_spaces(base_repo, project_pin, tmp_path):
    """A patch adding a string whose line ends in two spaces (a markdown line break, say)."""
    message = "[Spec] A note ending in spaces\n\nWhy: check test.\n\nUpstream-PR: 1\n"
    edit = (SECOND, "class GlobalConfig", f"{_SPACES}\nclass GlobalConfig")
    return one_patch_series(base_repo, project_pin, tmp_path / "spaces", message, edit)


def _user_config(tmp_path, monkeypatch, text: str) -> None:
    """The user's global git configuration (~/.gitconfig), with no identity, as the suite runs."""
    config = tmp_path / "user-gitconfig"
    config.write_text(f"[user]\n\tuseConfigOnly = true\n{text}")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_apply_writes_a_patch_as_written_whatever_apply_whitespace_says(
    sglpatch, checkout, package, base_repo, project_pin, tmp_path, monkeypatch, kind
):
    """`apply.whitespace=fix` in the user's ~/.gitconfig (a common setting, to clean the patches they apply): the
    toolkit's `git apply` took the two spaces off the end of the patch's added line, inside a string: the target
    held another text than the patch, "applied 1 patch", exit 0, and status said "the series is in". Now every
    `git apply` the toolkit runs applies the patch as written."""
    patches = _series_of_trailing_spaces(base_repo, project_pin, tmp_path)
    _user_config(tmp_path, monkeypatch, "[apply]\n\twhitespace = fix\n")
    target = checkout if kind == "checkout" else package
    code, out, err = sglpatch("apply", "--sglang", target, "--patches", patches)
    assert code == 0, (out, err)
    written = (target / SECOND if kind == "checkout" else package.parent / "sglang" / "global_config.py").read_text()
    assert _SPACES in written, [line for line in written.splitlines() if "two spaces" in line]


def test_a_rebase_keeps_a_patchs_trailing_spaces_whatever_apply_whitespace_says(
    sglpatch, checkout, base_repo, project_pin, tmp_path, monkeypatch
):
    """The same setting, then a rebase onto a branch that changes no file of the patch: the series was written
    again from what `git apply` had fixed, the user's patch without its spaces, "rebased", exit 0. Now the
    series is the same bytes."""
    patches = _series_of_trailing_spaces(base_repo, project_pin, tmp_path)
    before = _series_files(patches)
    _user_config(tmp_path, monkeypatch, "[apply]\n\twhitespace = fix\n")
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert _series_files(patches) == before


def test_a_rebase_writes_blank_context_lines_as_the_series_format_has_them_whatever_the_users_config_says(
    sglpatch, checkout, patches, tmp_path, monkeypatch
):
    """`diff.suppressBlankEmpty=true` in the user's ~/.gitconfig (or in the checkout's config): the rebase's
    format-patch wrote each blank context line as an empty line instead of a single space: every patch with one
    (both of the test series) rewritten, "rebased", exit 0 (round 12 pinned format-patch's other settings). Now the
    series is the same bytes."""
    before = _series_files(patches)
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    _user_config(tmp_path, monkeypatch, "[diff]\n\tsuppressBlankEmpty = true\n")
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert _series_files(patches) == before


# -- kills inside git of `rebase --abort` (testing/git_cut.py) ----------------------------------------------


def test_an_abort_killed_inside_its_git_and_run_again_ends_as_an_uninterrupted_one(
    sglpatch, checkout, patches, tmp_path
):
    """`rebase --abort` of a stopped rebase, killed inside one of its git commands (each of the 10 points where its
    `cherry-pick --abort`, `git checkout -f` and `update-ref -d` write a file or hold a ref's lock), then `--abort`
    again, as the stopped rebase asks. Before: git's lock (index.lock, HEAD.lock, ORIG_HEAD.lock, packed-refs.lock)
    stayed, so the second --abort failed in a git (`... failed (128)`) and recover refused, naming --abort: no way
    out (7 points); or it said "rebase aborted" with ORIG_HEAD.lock left; or it took the files its killed checkout
    had removed or written for changes of the user's and refused (3 points); the user's ORIG_HEAD was left as git
    wrote it; --continue went on from the half-undone rebase into refusals that sent the user elsewhere. Now an
    --abort records that it began (and ORIG_HEAD); run again, it removes the locks that run left and takes files as
    the original branch has them for its own: each point ends as an uninterrupted --abort; --continue is refused."""
    report = tmp_path / "report"
    git = stopped_at_a_conflict(sglpatch, checkout, patches, report)
    git.run("update-ref", "--no-deref", "ORIG_HEAD", "main")  # the user's own way back, kept by the rebase
    abort = ["rebase", "--sglang", checkout, "--patches", patches, "--report-dir", report, "--abort"]
    cuts = git_cut.EachPoint(abort, checkout, tmp_path)
    points = cuts.whole()
    aborted = tree_state(checkout)
    assert len(points) >= 8, points
    left = []
    for point in range(1, len(points) + 1):
        cuts.cut_at(point)
        cut_short = tree_state(checkout)
        go_on = git_cut.run_cli([*abort[:-1], "--continue"], {})
        assert go_on.returncode == 2 and "an --abort of this rebase was cut short" in go_on.stderr, go_on.stderr
        assert tree_state(checkout) == cut_short
        again = git_cut.run_cli(abort, {})
        if again.returncode != 0 or tree_state(checkout) != aborted:
            left.append((points[point - 1], again.returncode, again.stderr))
    assert not left, left


# -- the user's shell ----------------------------------------------------------------------------------------


def test_apply_status_and_revert_go_through_whatever_git_default_hash_says(sglpatch, checkout, patches, monkeypatch):
    """`GIT_DEFAULT_HASH=sha256` in the user's shell (set to try SHA-256 repositories): the scratch repositories
    the toolkit makes were SHA-256 while the user's checkout, whose objects they borrow, is SHA-1: apply, status,
    rebase and drift each failed in one line "`git -C /tmp/sglpatch-ws-... read-tree <id>` failed (128)" that named
    no cause (nothing changed). Now the variable is not passed: git makes the toolkit's repositories as without
    it, and apply and revert go through."""
    monkeypatch.setenv("GIT_DEFAULT_HASH", "sha256")
    sglang_trees.apply_status_revert(sglpatch, checkout, patches)


def test_clean_names_the_files_of_a_staged_rename_as_they_are(series_project, base_repo, sglpatch):
    """`git mv` of a file in build/sglang (staged, not committed), then `make clean`: `git status --porcelain -z`
    lists a rename as two names, the second without a status, and clean cut three characters off each entry: the
    refusal named `hon/sglang/global_config.py`, a file that is nowhere. Now renames are listed as a deletion and
    an addition: both names as they are."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    Git(where).run("mv", SECOND, "python/sglang/my_config.py")
    err = refused(sglpatch, series_project, command="clean")
    assert f"edits to {SECOND}, python/sglang/my_config.py" in err, err
