"""Checkouts as users keep them (issue 36): git's own background work, odd paths, eol settings, pending work,
modes and owners, sparse checkouts, and `status` against what `apply` does.

Each test runs the real CLI in a subprocess on real v0.5.14 trees (the fault harness's labs) and checks the
promise: exit 0 and the state the tool names, byte for byte, or one line on stderr, exit 2, no traceback, and
the tree exactly as it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from sglpatch.git import Git
from sglpatch.lines import default_patch_dir
from testing.fault_harness import OPERATIONS, PATCHED, PRISTINE, Lab, copy_tree, diff_states, make_labs, run_state
from testing.hostile import assert_refused
from testing.sglang_trees import BACKEND, SECOND, replace_in

APPLY, REVERT = OPERATIONS["apply"], OPERATIONS["revert"]


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "checkouts")


def wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.05)


# -- item 2: git's own background work --------------------------------------------------------------------

# Put in front of git's own commands (GIT_EXEC_PATH): `git repack` waits until $RELEASE exists, so the
# `git gc --auto` that ran it stays in the background, holding gc.log.lock and gc.pid, as long as a test needs.
_PAUSE_REPACK = """#!/bin/sh
if [ "$1" = repack ]; then
    : > "$PAUSED"
    while [ ! -e "$RELEASE" ]; do sleep 0.05; done
fi
exec "{git}" "$@"
"""


def gc_due(checkout: Path) -> None:
    """Make `git gc --auto` due, as in a clone that has fetched a few times: two packs, a limit of one."""
    git = Git(checkout)
    git.run("tag", "user-work", git.run_with_input(["commit-tree", "HEAD^{tree}", "-p", "HEAD"], b"the user's\n"))
    git.run("repack", "-q")
    git.run("config", "gc.autoPackLimit", "1")
    assert len(list((checkout / ".git" / "objects" / "pack").glob("*.pack"))) == 2


USER_COMMIT = ("commit", "-q", "--allow-empty", "-m", "another")


@contextmanager
def background_gc(lab: Lab, checkout: Path, folder: Path, start: tuple[str, ...] = USER_COMMIT):
    """A real `git gc --auto` (due: `gc_due`), which the git command `start` starts as git does, kept in the
    background (in its repack) until the block ends; then waited for."""
    folder.mkdir()
    (folder / "git").write_text(_PAUSE_REPACK.format(git=shutil.which("git")))
    (folder / "git").chmod(0o755)
    paused, release = folder / "paused", folder / "release"
    env = {**lab.env(), "GIT_EXEC_PATH": str(folder), "PAUSED": str(paused), "RELEASE": str(release)}
    try:
        subprocess.run(["git", *start], cwd=checkout, env=env, check=True)
        wait_for(paused.exists, "the background gc to reach its repack")
        assert (checkout / ".git" / "gc.log.lock").exists() and (checkout / ".git" / "gc.pid").exists()
        yield
    finally:
        release.touch()
        wait_for(lambda: not (checkout / ".git" / "gc.pid").exists(), "the background gc to finish")


def test_apply_and_revert_run_beside_a_background_gc(labs, tmp_path):
    """Before: right after a commit git started `git gc --auto` in the background, and apply refused: "gc.log.lock
    is in use (pid N (git gc --auto --quiet))". git lets commands run beside its auto-gc; so does sglpatch."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    gc_due(tree.target)
    with background_gc(lab, tree.target, tmp_path / "gc"):
        applied = lab.sglpatch(*APPLY.argv(tree))
        assert applied.returncode == 0, applied.stderr
        reverted = lab.sglpatch(*REVERT.argv(tree))
        assert reverted.returncode == 0, reverted.stderr
    assert Git(tree.target).current_branch() == "main"
    assert Git(tree.target).run("status", "--porcelain") == ""


def test_recover_clears_the_killed_runs_lock_beside_a_background_gc(labs, tmp_path):
    """A background gc holds no index.lock: recover does not take it for the holder of the killed run's."""
    lab = labs["checkout"]
    point = next(i for i, line in enumerate(lab.git_trace(REVERT), 1) if "git checkout" in line)
    tree = lab.fresh(REVERT.start)
    gc_due(tree.target)
    killed = lab.sglpatch(*REVERT.argv(tree), own_group=True, **lab.git_cut_env(tree, at=point))
    assert killed.returncode == -signal.SIGKILL and (tree.target / ".git" / "index.lock").exists()
    with background_gc(lab, tree.target, tmp_path / "gc", start=("gc", "--auto", "--quiet")):
        recovered = lab.sglpatch("recover", "--sglang", str(tree.target))
        assert recovered.returncode == 0, recovered.stderr
    assert not (tree.target / ".git" / "index.lock").exists()
    assert Git(tree.target).current_branch() == "main"
    assert Git(tree.target).run("status", "--porcelain") == ""


def test_the_toolkit_starts_no_gc_in_the_users_repository(labs):
    """Before: apply's `git fetch` ran `git gc --auto` when it was due, which packed the user's refs (and
    repacked in the background): after apply and revert, .git was not as it was."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    gc_due(tree.target)
    before = run_state(tree)
    assert lab.sglpatch(*APPLY.argv(tree)).returncode == 0
    assert lab.sglpatch(*REVERT.argv(tree)).returncode == 0
    assert run_state(tree) == before, diff_states(run_state(tree), before)
    assert len(list((tree.target / ".git" / "objects" / "pack").glob("*.pack"))) == 2


# -- items 3 and 4: a target's path holding any byte ------------------------------------------------------

# folder name, how the tool's messages show it, the environment
ODD_FOLDERS = {
    "non-UTF-8 byte": (os.fsdecode(b"odd\xff"), "odd\\udcff", {}),
    "newline": ("new\nline", "new\\nline", {}),
    "non-ASCII in the C locale": (
        "caf\u00e9",
        "caf\\udcc3\\udca9",
        {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"},
    ),
}


@pytest.mark.parametrize("kind", ["checkout", "package"])
@pytest.mark.parametrize("folder", list(ODD_FOLDERS))
def test_a_target_path_holding_any_byte_is_applied_and_reverted(labs, tmp_path, kind, folder):
    """Before: a traceback (UnicodeEncodeError: surrogates not allowed) from the target lock for apply, revert and
    recover and from the workspace for status; a checkout under a folder with a newline failed in `git read-tree`
    (the alternates file split at it; the checkout has a commit build/sglang lacks, so the workspace cannot find
    its tree there). Now every command works there, and prints the path in escapes on one line."""
    lab = labs[kind]
    name, shown, env = ODD_FOLDERS[folder]
    tree = lab.run_at(tmp_path / name)
    copy_tree(lab.template(PRISTINE).root, tree.root)
    if kind == "checkout":
        (tree.target / "NOTES.user").write_text("a file of the user's\n")
        Git(tree.target).run("add", "NOTES.user")
        Git(tree.target).run("commit", "-q", "-m", "a commit of the user's")
    before = run_state(tree)
    for argv in (APPLY.argv(tree), ["status", "--sglang", str(tree.target), "--patches", str(tree.patches)]):
        result = lab.sglpatch(*argv, **env)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (argv[0], result.stderr)
        assert f"{shown}/" in result.stdout, result.stdout
    assert result.stdout.count(" applied") == 2, result.stdout
    for argv in (REVERT.argv(tree), ["recover", "--sglang", str(tree.target)]):
        result = lab.sglpatch(*argv, **env)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (argv[0], result.stderr)
        assert f"{shown}/" in result.stdout, result.stdout
        assert run_state(tree) == before, diff_states(run_state(tree), before)


# -- item 5: eol settings changed since the clone ------------------------------------------------------------


def porcelain(checkout: Path) -> str:
    return Git(checkout).run("status", "--porcelain", "--untracked-files=all")


def test_core_autocrlf_set_since_the_clone_leaves_git_status_as_it_was(labs):
    """Before: every byte came back, but the index still held the sizes of the CRLF files git's checkout had
    written, so `git status` listed every file the series touches as modified (it was clean)."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    Git(tree.target).run("config", "core.autocrlf", "true")
    assert porcelain(tree.target) == ""
    before = run_state(tree)
    assert lab.sglpatch(*APPLY.argv(tree)).returncode == 0
    assert lab.sglpatch(*REVERT.argv(tree)).returncode == 0
    assert porcelain(tree.target) == ""
    assert run_state(tree) == before, diff_states(run_state(tree), before)


# -- item 6: a commit git prepared for the user ---------------------------------------------------------------


def _side_branch(checkout: Path) -> None:
    git, version = Git(checkout), checkout / "python" / "sglang" / "version.py"
    git.run("checkout", "-q", "-b", "side")
    version.write_text(version.read_text() + "# the user's side branch\n")
    git.run("commit", "-qam", "side")
    git.run("checkout", "-q", "main")


@pytest.mark.parametrize(
    "prepare,left",
    [(("merge", "--squash", "side"), "SQUASH_MSG"), (("cherry-pick", "-n", "side"), "MERGE_MSG")],
    ids=["merge-squash", "cherry-pick-n"],
)
@pytest.mark.parametrize("command", ["apply", "revert"])
def test_a_commit_git_prepared_is_not_dropped(labs, prepare, left, command):
    """Before: apply and revert switched branches and git deleted SQUASH_MSG (or MERGE_MSG and AUTO_MERGE), the
    staged changes kept: the user's next commit lost its message. Now both refuse in one line, nothing changed."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE if command == "apply" else PATCHED)
    _side_branch(tree.target)
    if command == "revert":
        Git(tree.target).run("checkout", "-q", "sglpatch/v0.5.14")
    Git(tree.target).run(*prepare)
    assert (tree.target / ".git" / left).exists()
    before = run_state(tree)
    argv = APPLY.argv(tree) if command == "apply" else REVERT.argv(tree)
    assert_refused(lab.sglpatch(*argv), left, "waits to be committed", "nothing was changed")
    assert run_state(tree) == before, diff_states(run_state(tree), before)


# -- item 7: modes and owners ----------------------------------------------------------------------------

ANOTHER_USER = 1234


def test_an_executable_bit_git_does_not_track_comes_back(labs):
    """core.fileMode=false: git ignores the executable bit, and its checkout rewrote a touched file 644. Before:
    revert left it so."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    Git(tree.target).run("config", "core.fileMode", "false")
    (tree.target / BACKEND).chmod(0o755)
    assert porcelain(tree.target) == ""
    before = run_state(tree)
    assert lab.sglpatch(*APPLY.argv(tree)).returncode == 0
    assert lab.sglpatch(*REVERT.argv(tree)).returncode == 0
    assert run_state(tree) == before, diff_states(run_state(tree), before)


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_a_strict_umask_does_not_change_the_modes_revert_gives_back(labs, kind):
    """Before: under `umask 077` the files git's checkout rewrote came back 600 (they were 644)."""
    lab = labs[kind]
    tree = lab.fresh(PRISTINE)
    before = run_state(tree)
    for argv in (APPLY.argv(tree), REVERT.argv(tree)):
        result = subprocess.run(
            [sys.executable, "-m", "sglpatch", *argv],
            capture_output=True,
            text=True,
            env=lab.env(),
            preexec_fn=lambda: os.umask(0o077),
        )
        assert result.returncode == 0, result.stderr
    assert run_state(tree) == before, diff_states(run_state(tree), before)


def _give_to_another_user(tree) -> None:
    subprocess.run(["chown", "-R", f"{ANOTHER_USER}:{ANOTHER_USER}", str(tree.root)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the target to another user")
@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_a_target_of_another_user_keeps_its_owners(labs, tmp_path, kind):
    """Root patching a package folder, or a checkout it trusts (safe.directory), of another user. Before: every
    file written came back owned by root (and revert said "restored byte for byte"); in a checkout git's own
    files too (the index, HEAD), which the user could then no longer write."""
    lab = labs[kind]
    tree = lab.fresh(PRISTINE)
    _give_to_another_user(tree)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[safe]\n\tdirectory = {tree.target}\n")
    env = {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig")}  # the suite's own global config otherwise
    before = run_state(tree)
    applied = lab.sglpatch(*APPLY.argv(tree), **env)
    assert applied.returncode == 0, applied.stderr
    patched = run_state(tree)
    assert not [key for key, value in patched.items() if "owned by" in value], diff_states(patched, before)
    reverted = lab.sglpatch(*REVERT.argv(tree), **env)
    assert reverted.returncode == 0, reverted.stderr
    assert run_state(tree) == before, diff_states(run_state(tree), before)


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None, reason="needs root and setpriv to run as two other users")
@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_a_file_of_another_owner_is_refused_when_not_root(labs, kind):
    """Run as the target's owner, where one touched file belongs to a third user (a folder the owner can write
    in). Before: git (or the journal) rewrote it, and it came back the owner's. Now refused, nothing changed."""
    lab = labs[kind]
    top = Path(tempfile.mkdtemp(prefix="sglpatch-owners-"))  # pytest's own folder is root's alone
    try:
        top.chmod(0o755)
        copy_tree(lab.template(PRISTINE).root, top / "tree")
        tree = lab.run_at(top / "tree")
        _give_to_another_user(tree)
        touched = tree.target / (BACKEND if kind == "checkout" else BACKEND.removeprefix("python/sglang/"))
        os.chown(touched, ANOTHER_USER + 1, ANOTHER_USER + 1)
        before = run_state(tree)
        as_owner = [SETPRIV, f"--reuid={ANOTHER_USER}", f"--regid={ANOTHER_USER}", "--clear-groups"]
        result = subprocess.run(
            [*as_owner, sys.executable, "-m", "sglpatch", *APPLY.argv(tree)],
            capture_output=True,
            text=True,
            env=lab.env(HOME=str(tree.root)),
        )
        assert_refused(result, f"owned by uid {ANOTHER_USER + 1}", "nothing was changed")
        assert run_state(tree) == before, diff_states(run_state(tree), before)
    finally:
        shutil.rmtree(top)


# -- item 8: sparse checkouts -----------------------------------------------------------------------------------


def files_on_disk(checkout: Path) -> int:
    return sum(1 for p in checkout.rglob("*") if p.is_file() and ".git" not in p.relative_to(checkout).parts)


def test_a_sparse_checkout_leaving_out_files_the_series_changes_is_refused(labs):
    """Before: apply went ahead on a branch whose changed files were not on disk (git left them out)."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    Git(tree.target).run("update-index", "-q", "--refresh")  # a copy's stale stat data would keep every file
    Git(tree.target).run("sparse-checkout", "set", "python/sglang/srt/managers")
    before = run_state(tree)
    assert_refused(lab.sglpatch(*APPLY.argv(tree)), "sparse checkout", "dsa_backend.py", "nothing was changed")
    assert run_state(tree) == before, diff_states(run_state(tree), before)


def test_sparse_patterns_not_applied_to_the_work_tree_are_not_applied_by_apply_and_revert(labs):
    """The issue's case: sparse patterns set (`python/sglang/srt/layers`) while every file is still on disk (set
    by hand, or files git could not remove: "not up to date"). Before: apply's `git checkout` applied the patterns,
    and after revert 906 files of 3,191 were left, with success said."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    git = Git(tree.target)
    git.run("config", "core.sparseCheckout", "true")
    git.run("config", "core.sparseCheckoutCone", "true")
    (tree.target / ".git" / "info").mkdir(exist_ok=True)
    (tree.target / ".git" / "info" / "sparse-checkout").write_text(
        "/*\n!/*/\n/python/\n!/python/*/\n/python/sglang/\n!/python/sglang/*/\n/python/sglang/srt/\n"
        "!/python/sglang/srt/*/\n/python/sglang/srt/layers/\n"
    )
    before, on_disk = run_state(tree), files_on_disk(tree.target)
    assert lab.sglpatch(*APPLY.argv(tree)).returncode == 0
    assert lab.sglpatch(*REVERT.argv(tree)).returncode == 0
    assert files_on_disk(tree.target) == on_disk
    assert run_state(tree) == before, diff_states(run_state(tree), before)


# -- item 9: status says what apply does ------------------------------------------------------------------------


def status_of(lab: Lab, tree, patches: Path | None = None) -> subprocess.CompletedProcess:
    result = lab.sglpatch("status", "--sglang", str(tree.target), "--patches", str(patches or tree.patches))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


def verdict(status: subprocess.CompletedProcess) -> str:
    return status.stdout.strip().splitlines()[-1]


def test_status_says_apply_refuses_a_base_with_a_committed_edit(labs):
    """A committed edit to a touched file, away from the patches' lines. Before: status said every patch
    "applies cleanly", and apply refused ("base differs from the pin ... try --3way")."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    (tree.target / SECOND).write_text((tree.target / SECOND).read_text() + "# a local note\n")
    Git(tree.target).run("commit", "-qam", "a local edit")
    applied = lab.sglpatch(*APPLY.argv(tree))
    assert applied.returncode == 2, applied.stdout
    refusal = applied.stderr.strip().split(": error: ", 1)[1]
    assert "base differs from the pin" in refusal
    assert verdict(status_of(lab, tree)) == f"apply:  refuses: {refusal}"


def test_status_does_not_blame_later_patches_for_the_first_conflict(labs):
    """The project's series on a base whose line in environ.py patch 1 changes was edited and committed. Before:
    status said patch 2 conflicts in dsa_indexer.py, a file the user never touched (it needs patch 1's lines)."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    environ = tree.target / "python" / "sglang" / "srt" / "environ.py"
    replace_in(environ, "SGLANG_DSA_TOPK_BROADCAST = EnvBool(False)", "SGLANG_DSA_TOPK_BROADCAST = EnvBool(True)")
    Git(tree.target).run("commit", "-qam", "a local edit on patch 1's lines")
    out = status_of(lab, tree, default_patch_dir()).stdout
    lines = [line for line in out.splitlines() if line.startswith("  0")]
    assert "conflicts" in lines[0] and "environ.py" in lines[0], out
    assert all("not tried  (after 0001, which conflicts)" in line for line in lines[1:]), out
    assert "dsa_indexer.py" not in out


def test_status_beside_a_run_that_is_working_says_so_as_recover_does(labs):
    """An apply stopped mid-write (SIGSTOP) holds the target. Before: status said the run "was cut short" (run
    recover), and recover said another run was working on it."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    points = len(lab.trace(APPLY))
    first = subprocess.Popen(
        [sys.executable, "-m", "sglpatch", *APPLY.argv(tree)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=lab.env(SGLPATCH_FAULT_AT=str(points // 2), SGLPATCH_FAULT_SIGNAL="STOP"),
    )
    try:
        _, how = os.waitpid(first.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(how), "the apply ended instead of stopping mid-write"
        status = status_of(lab, tree)
        recover = lab.sglpatch("recover", "--sglang", str(tree.target))
    finally:
        os.kill(first.pid, signal.SIGCONT)
        first.communicate(timeout=120)
    assert "cut short" not in status.stdout and f"pid {first.pid}" in status.stdout, status.stdout
    assert recover.returncode == 2 and "another sglpatch run is working" in recover.stderr, recover.stderr
    assert verdict(status) == f"apply:  refuses: {recover.stderr.strip().split(': error: ', 1)[1]}"
