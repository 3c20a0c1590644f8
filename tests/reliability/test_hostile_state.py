"""A target's state in hostile hands (issue 24, part A): kills inside git, stale locks, hooks, stacks,
worktrees, another owner, long paths, 3-way records, scratch folders.

Each test runs the real CLI in a subprocess on real v0.5.14 trees (the fault harness's labs) and checks
the promise: exit 0 and the state the tool names, byte for byte, or one line on stderr, exit 2, no
traceback, and the tree exactly as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sglpatch.git import Git, blob_id
from sglpatch.lines import default_patch_dir
from sglpatch.pin import load_pin
from sglpatch.series import PACKAGE_PREFIX
from testing.fault_harness import OPERATIONS, PATCHED, PRISTINE, Lab, diff_states, make_labs, run_state
from testing.hostile import assert_refused, assert_state, read_only, without_override, writable
from testing.sglang_trees import OVERLAP, SECOND, make_series, replace_in

APPLY, REVERT = OPERATIONS["apply"], OPERATIONS["revert"]


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "state")


def last_line(result: subprocess.CompletedProcess) -> str:
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


def point_of(labels: list[str], *words: str) -> int:
    """The 1-based number of the first trace line holding every word."""
    return next(i for i, line in enumerate(labels, 1) if all(word in line for word in words))


def kill_at_fault_point(lab: Lab, operation, label: str):
    """Run `operation` on a fresh tree and SIGKILL it at the fault point named `label`."""
    labels = [line.split("\t", 1)[1] for line in lab.trace(operation)]
    tree = lab.fresh(operation.start)
    killed = lab.sglpatch(
        *operation.argv(tree), SGLPATCH_FAULT_AT=str(labels.index(label) + 1), SGLPATCH_FAULT_SIGNAL="KILL"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return tree


def kill_inside_git(lab: Lab, operation, *words: str):
    """Run `operation` on a fresh tree and SIGKILL its process group inside git, at the first git write
    whose trace line holds `words` (testing/git_cut.py)."""
    point = point_of(lab.git_trace(operation), *words)
    tree = lab.fresh(operation.start)
    killed = lab.sglpatch(*operation.argv(tree), own_group=True, **lab.git_cut_env(tree, at=point))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return tree


# -- defect 4: kills inside `git checkout`, and the locks git leaves ---------------------------


def test_a_revert_killed_inside_git_checkout_is_finished_by_recover(labs):
    """The issue's case: files missing, .git/index.lock left; recover refused for ever, its advice failed."""
    lab = labs["checkout"]
    tree = kill_inside_git(lab, REVERT, "git checkout", "(smudge)")
    assert (tree.target / ".git" / "index.lock").exists()
    touched = json.loads((tree.target / ".git" / "sglpatch-state.json").read_text())["touched"]
    pristine = lab.template(PRISTINE).target
    missing = [path for path in touched if (pristine / path).exists() and not (tree.target / path).exists()]
    assert missing, "the kill should have left a series file removed and not yet rewritten"
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0, result.stderr
    assert "as it was" in last_line(result), result.stdout
    assert_state(lab, tree, PRISTINE)


def test_a_revert_killed_at_gits_index_lock_is_finished_before_the_dead_run_is_reaped(labs):
    """Issue 36, item 1: the process group of a revert killed while its `git checkout` holds .git/index.lock,
    and recover run before the dead run is reaped (its parent, a supervisor or a container's first process,
    has not collected it): /proc still lists its pid and start time. Before: "index.lock was not left by the
    interrupted sglpatch run", for as long as the zombie stayed."""
    lab = labs["checkout"]
    point = point_of(lab.git_trace(REVERT), "git checkout", "(smudge)")
    tree = lab.fresh(REVERT.start)
    with lab.cut_in_git(REVERT, tree, point) as killed:
        assert killed.signal == signal.SIGKILL, killed.describe()
        assert (tree.target / ".git" / "index.lock").exists()
        assert json.loads((tree.target / ".git" / "sglpatch-state.json").read_text())["state"] == "reverting"
        result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0, result.stderr
    assert "as it was" in last_line(result), result.stdout
    assert_state(lab, tree, PRISTINE)


def test_an_apply_killed_inside_git_checkout_is_rolled_back(labs):
    lab = labs["checkout"]
    tree = kill_inside_git(lab, APPLY, "git checkout", "(smudge)")
    assert_recovered_as_it_was(lab, tree)


def _plant_lock(tree, name: str = "index.lock") -> Path:
    """The lock a git killed right after taking it leaves (no file written yet): empty, younger than the state."""
    lock = tree.target / ".git" / name
    lock.write_bytes(b"")
    state = tree.target / ".git" / "sglpatch-state.json"
    os.utime(lock, ns=(state.stat().st_mtime_ns + 1000, state.stat().st_mtime_ns + 1000))
    return lock


def assert_recovered_as_it_was(lab: Lab, tree) -> None:
    result = lab.sglpatch("recover", "--sglang", str(tree.target))
    assert result.returncode == 0 and "as it was" in last_line(result), result.stderr
    assert_state(lab, tree, PRISTINE)


def test_an_apply_killed_with_the_index_locked_is_not_called_as_it_was_with_the_lock_left(labs):
    """The issue's other case: recover said "as it was" with exit 0 and left .git/index.lock behind."""
    lab = labs["checkout"]
    tree = kill_at_fault_point(lab, APPLY, "checkout: branch fetched")
    _plant_lock(tree)
    assert_recovered_as_it_was(lab, tree)


def test_recover_never_removes_the_lock_of_a_git_still_running(labs):
    lab = labs["checkout"]
    tree = kill_at_fault_point(lab, APPLY, "checkout: branch fetched")
    lock = _plant_lock(tree)
    still_running = subprocess.Popen(["git", "cat-file", "--batch"], cwd=tree.target, stdin=subprocess.PIPE)
    try:
        before = run_state(tree)
        result = lab.sglpatch("recover", "--sglang", str(tree.target))
        assert_refused(result, "index.lock", f"pid {still_running.pid}", "still works")
        assert lock.exists() and run_state(tree) == before
    finally:
        still_running.communicate(b"")
    assert_recovered_as_it_was(lab, tree)


def test_recover_leaves_a_lock_older_than_the_interrupted_run(labs):
    """A lock that was there before the run wrote its state is not the run's: named, not removed."""
    lab = labs["checkout"]
    tree = kill_at_fault_point(lab, APPLY, "checkout: branch fetched")
    lock = tree.target / ".git" / "index.lock"
    lock.write_bytes(b"")
    os.utime(lock, (1_000_000_000, 1_000_000_000))
    before = run_state(tree)
    assert_refused(lab.sglpatch("recover", "--sglang", str(tree.target)), "index.lock", "was not left by")
    assert run_state(tree) == before


def test_a_stale_lock_with_no_interrupted_run_is_refused_in_sglpatch_words(labs):
    """Before: apply ran `git checkout` into the lock and printed git's own lines; now one line, before any
    write, and recover does not touch a lock it did not leave."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    (tree.target / ".git" / "index.lock").write_bytes(b"")
    before = run_state(tree)
    err = assert_refused(lab.sglpatch(*APPLY.argv(tree)), "index.lock", "no sglpatch run was interrupted")
    assert "fatal:" not in err and "Another git process" not in err
    assert_refused(lab.sglpatch("recover", "--sglang", str(tree.target)), "index.lock")
    assert run_state(tree) == before


# -- defect 7: a failing post-checkout hook ------------------------------------------------------


def test_a_failing_post_checkout_hook_does_not_leave_the_apply_half_done(labs):
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    hook = tree.target / ".git" / "hooks" / "post-checkout"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'hook: no' >&2\nexit 3\n")
    hook.chmod(0o755)
    pristine_with_hook = run_state(tree)
    result = lab.sglpatch(*APPLY.argv(tree))
    assert result.returncode == 0, result.stderr
    assert "post-checkout hook exited" in result.stdout, result.stdout
    record = json.loads((tree.target / ".git" / "sglpatch-state.json").read_text())
    assert record.get("state", "applied") == "applied" and Git(tree.target).current_branch() == record["branch"]
    patched = {k: v for k, v in run_state(tree).items() if "hooks/post-checkout" not in k}
    assert patched == lab.reference(PATCHED), diff_states(patched, lab.reference(PATCHED))
    assert lab.sglpatch("revert", "--sglang", str(tree.target)).returncode == 0
    assert run_state(tree) == pristine_with_hook


# -- defect 8: a second series on top of the first --------------------------------------------------


@pytest.fixture(scope="module")
def second_series(tmp_path_factory, base_repo, project_pin):
    """A one-patch series on another file, pinned on that file alone: it applies on top of the test series."""
    tmp = tmp_path_factory.mktemp("second-series")
    message = "[Spec] Mark the overlap utils for a stacked series\n\nWhy: a second series.\n\nUpstream-PR: 1\n"
    anchor = "class FutureMap"
    folder = make_series(
        base_repo, tmp / "dev", tmp / "patches", project_pin, [(message, [(OVERLAP, anchor, "# stacked\n" + anchor)])]
    )
    blob = blob_id((base_repo / OVERLAP).read_bytes())
    (folder / "pin.json").write_text(replace(load_pin(folder), blobs={OVERLAP: blob}).to_json())
    return folder


def test_a_stacked_apply_is_reverted_one_series_at_a_time(labs, second_series):
    """Before: the second revert said "nothing to revert" while the first series stayed on its branch."""
    lab = labs["checkout"]
    tree = lab.fresh(PATCHED)
    stacked = lab.sglpatch("apply", "--sglang", str(tree.target), "--patches", str(second_series), "--branch", "top")
    assert stacked.returncode == 0 and "stacked on sglpatch/v0.5.14" in stacked.stdout, stacked.stderr
    status = lab.sglpatch("status", "--sglang", str(tree.target), "--patches", str(second_series))
    assert "1 more series below it" in status.stdout, status.stdout
    first = lab.sglpatch("revert", "--sglang", str(tree.target))
    assert first.returncode == 0 and "revert again" in first.stdout, first.stderr
    assert_state(lab, tree, PATCHED)
    second = lab.sglpatch("revert", "--sglang", str(tree.target))
    assert second.returncode == 0, second.stderr
    assert_state(lab, tree, PRISTINE)


def test_a_second_series_off_the_first_series_branch_is_refused(labs, second_series):
    lab = labs["checkout"]
    tree = lab.fresh(PATCHED)
    subprocess.run(["git", "-C", str(tree.target), "checkout", "-q", "main"], check=True)
    before = run_state(tree)
    args = ["apply", "--sglang", str(tree.target), "--patches", str(second_series), "--branch", "top"]
    assert_refused(lab.sglpatch(*args), "carries a series on branch sglpatch/v0.5.14", "HEAD is not on it")
    assert run_state(tree) == before


# -- defect 9: a `git worktree` ------------------------------------------------------------------


def test_a_git_worktree_is_patched_and_reverted_with_no_scratch_left(labs, tmp_path):
    """Before: `read-tree` failed in the workspace (objects live in the main repository) and it leaked."""
    lab = labs["checkout"]
    main = lab.fresh(PRISTINE).target
    Git(main).run("commit", "-q", "--allow-empty", "-m", "a commit only this clone has")
    worktree = tmp_path / "worktree"
    Git(main).run("worktree", "add", "-q", "-b", "work", str(worktree))
    patches = lab.template(PRISTINE).patches
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = {p: p.read_bytes() for p in worktree.rglob("*") if p.is_file() and ".git" not in p.parts}
    applied = lab.sglpatch("apply", "--sglang", str(worktree), "--patches", str(patches), TMPDIR=str(scratch))
    assert applied.returncode == 0, applied.stderr
    assert Git(worktree).current_branch() == "sglpatch/v0.5.14" and Git(main).current_branch() == "main"
    assert (Git(worktree).git_dir() / "sglpatch-state.json").is_file()
    status = lab.sglpatch("status", "--sglang", str(worktree), "--patches", str(patches), TMPDIR=str(scratch))
    assert status.returncode == 0 and status.stdout.count(" applied") == 2, status.stdout
    reverted = lab.sglpatch("revert", "--sglang", str(worktree), TMPDIR=str(scratch))
    assert reverted.returncode == 0, reverted.stderr
    assert Git(worktree).current_branch() == "work"
    assert {p: p.read_bytes() for p in worktree.rglob("*") if p.is_file() and ".git" not in p.parts} == before
    assert list(scratch.iterdir()) == []


# -- defect 10: a journal left "reverting" ------------------------------------------------------------


def _pinned_package(source: Path, dest: Path, pin) -> Path:
    """A package folder holding only what the project's series reads: `__init__.py`, `srt/`, the pinned files.
    (A whole sglang tree does not fit under a path this long.)"""
    (dest / "srt").mkdir(parents=True)
    shutil.copy2(source / "__init__.py", dest / "__init__.py")
    for path, blob in pin.blobs.items():
        if blob:
            local = dest / path.removeprefix("python/sglang/")
            local.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / path.removeprefix("python/sglang/"), local)
    return dest


def _near_path_max(root: Path, pin) -> Path:
    """Where a package folder's longest pinned file just fits under PATH_MAX, and the temporary file beside
    it does not."""
    longest = max(len(path.removeprefix(PACKAGE_PREFIX)) for path in pin.blobs if path.startswith(PACKAGE_PREFIX))
    room = os.pathconf(root, "PC_PATH_MAX") - 1 - longest - len("/sglang/") - 2
    folder = root
    while room - len(str(folder)) > 200:
        folder = folder / ("d" * 180)
    return folder / ("e" * (room - len(str(folder)) - 1)) / "sglang"


def test_a_package_near_path_max_is_refused_before_the_first_write(labs, tmp_path, project_pin):
    """Before: the temporary file beside a long path did not fit, the roll-back failed the same way, and the
    journal stayed "reverting" for ever, with advice (make it writable) that could not help."""
    lab = labs["package"]
    package = _pinned_package(lab.template(PRISTINE).target, _near_path_max(tmp_path, project_pin), project_pin)
    before = _files(package)
    result = lab.sglpatch("apply", "--sglang", str(package), "--patches", str(default_patch_dir()))
    assert_refused(result, "too long for the file system", "nothing was changed")
    assert _files(package) == before and not (package / ".sglpatch").exists()


def test_a_journal_left_reverting_near_path_max_is_finished_by_recover(labs, tmp_path, project_pin):
    """What the old apply left there: state "reverting", every file still as before. recover finishes it (there
    is nothing to write), and status says where the files stand."""
    lab = labs["package"]
    short = _pinned_package(lab.template(PRISTINE).target, tmp_path / "short" / "sglang", project_pin)
    before = _files(short)
    trace = tmp_path / "trace"
    apply = ["apply", "--sglang", str(short), "--patches", str(default_patch_dir())]
    assert lab.sglpatch(*apply, SGLPATCH_FAULT_TRACE=str(trace)).returncode == 0
    assert lab.sglpatch("revert", "--sglang", str(short)).returncode == 0 and _files(short) == before
    point = point_of(trace.read_text().splitlines(), "durable: journal.json renamed")
    assert lab.sglpatch(*apply, SGLPATCH_FAULT_AT=str(point), SGLPATCH_FAULT_SIGNAL="KILL").returncode == -9
    journal_file = short / ".sglpatch" / "journal.json"
    journal_record = json.loads(journal_file.read_text())
    journal_file.write_text(json.dumps({**journal_record, "state": "reverting"}))
    package = _near_path_max(tmp_path, project_pin)
    package.parent.mkdir(parents=True)
    short.rename(package)
    status = lab.sglpatch("status", "--sglang", str(package), "--patches", str(default_patch_dir()))
    assert status.returncode == 0, status.stderr
    files = len(journal_record["files"])
    assert f"revert interrupted: all {files} files are as they were" in status.stdout, status.stdout
    result = lab.sglpatch("recover", "--sglang", str(package))
    assert result.returncode == 0 and "as it was" in last_line(result), result.stderr
    assert _files(package) == before


def test_a_revert_into_an_unwritable_subfolder_changes_nothing(labs):
    """Before: revert wrote "reverting", restored the files it could and stopped half-way."""
    lab = labs["package"]
    tree = lab.fresh(PATCHED)
    folder = tree.target / "srt" / "layers" / "attention"
    read_only(folder)
    try:
        result = without_override(lab, "revert", "--sglang", tree.target)
        assert_refused(result, "Permission denied", "nothing was changed", "still patched")
    finally:
        writable(folder)
    assert_state(lab, tree, PATCHED)
    assert lab.sglpatch("revert", "--sglang", str(tree.target)).returncode == 0
    assert_state(lab, tree, PRISTINE)


# -- defect 12: a checkout git refuses to use ----------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the checkout to another user")
@pytest.mark.parametrize("command", ["apply", "status", "revert", "recover"])
def test_a_checkout_of_another_owner_is_refused_not_patched_as_a_folder(labs, tmp_path, command):
    """Before: git refused the checkout ("dubious ownership"), so it was taken for a package folder and its
    tracked files were rewritten in place."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    subprocess.run(["chown", "-R", "12345:12345", str(tree.target)], check=True)
    home = tmp_path / "home"
    home.mkdir()
    before = _files(tree.target)
    args = [command, "--sglang", str(tree.target)] + (
        ["--patches", str(tree.patches)] if command in ("apply", "status") else []
    )
    result = lab.sglpatch(*args, HOME=str(home), XDG_CONFIG_HOME=str(home))
    assert_refused(result, "owned by another user", "safe.directory", "nothing was changed")
    assert _files(tree.target) == before
    assert not (tree.target / "python" / "sglang" / ".sglpatch").exists()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# -- defect 14: status after a 3-way apply ----------------------------------------------------------


def test_status_after_a_three_way_apply_reads_the_record(labs):
    """Before: the patches could not be taken back out on the drifted base, so status called them conflicts."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    replace_in(tree.target / SECOND, "# FIXME: deprecate", "# FIXME (local): deprecate")
    Git(tree.target).run("commit", "-qam", "a local edit in the context of patch 2")
    refused = lab.sglpatch(*APPLY.argv(tree))
    assert refused.returncode == 2, refused.stdout
    applied = lab.sglpatch(*APPLY.argv(tree), "--3way")
    assert applied.returncode == 0, applied.stderr
    base = Git(tree.target).run("rev-parse", "HEAD~2")
    status = lab.sglpatch("status", "--sglang", str(tree.target), "--patches", str(tree.patches))
    assert status.returncode == 0, status.stderr
    assert f"applied (3-way on base {base[:12]})" in status.stdout, status.stdout
    assert "conflicts" not in status.stdout and status.stdout.count("applied (3-way)") == 2, status.stdout
    again = lab.sglpatch(*APPLY.argv(tree), "--3way")
    assert again.returncode == 0 and "already applied" in again.stdout, again.stdout + again.stderr


# -- defect 15: scratch folders, and git's own words in refusals ----------------------------------------


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_the_scratch_of_a_killed_run_is_removed_by_recover(labs, tmp_path, kind):
    lab = labs[kind]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    labels = [line.split("\t", 1)[1] for line in lab.trace(APPLY)]
    tree = lab.fresh(PRISTINE)
    killed = lab.sglpatch(
        *APPLY.argv(tree), SGLPATCH_FAULT_AT=str(len(labels) // 2), SGLPATCH_FAULT_SIGNAL="KILL", TMPDIR=str(scratch)
    )
    assert killed.returncode == -signal.SIGKILL
    left = [p.name for p in scratch.iterdir()]
    assert left and all(name.startswith("sglpatch-ws-") for name in left), left
    live = scratch / f"sglpatch-ws-{os.getpid()}.{_start_of(os.getpid())}-live"
    live.mkdir()  # a folder of a run still working (this test's own pid) is kept
    result = lab.sglpatch("recover", "--sglang", str(tree.target), TMPDIR=str(scratch))
    assert result.returncode == 0, result.stderr
    assert [p.name for p in scratch.iterdir()] == [live.name]


def _start_of(pid: int) -> int:
    from sglpatch.safety.run_mark import process_start

    return process_start(pid) or 0


def test_a_failed_git_call_is_one_sglpatch_line_without_git_stderr_unless_verbose(tmp_path, monkeypatch):
    from sglpatch.git import GitFailed, init_repo

    monkeypatch.delenv("SGLPATCH_VERBOSE", raising=False)
    repo = init_repo(tmp_path / "repo")
    with pytest.raises(GitFailed) as quiet:
        repo.run("rev-parse", "--verify", "no-such-branch^{commit}")
    assert "fatal" not in str(quiet.value) and "sglpatch -v" in str(quiet.value), str(quiet.value)
    monkeypatch.setenv("SGLPATCH_VERBOSE", "1")
    with pytest.raises(GitFailed) as verbose:
        repo.run("rev-parse", "--verify", "no-such-branch^{commit}")
    assert "fatal" in str(verbose.value)


# -- foreign: another tool's operation in progress --------------------------------------------------


def test_a_git_operation_of_another_tool_in_progress_is_named_not_written_over(labs):
    """A `git cherry-pick` stopped on a conflict: apply and recover name it in one line and write nothing."""
    lab = labs["checkout"]
    tree = lab.fresh(PRISTINE)
    git, version = Git(tree.target), tree.target / "python" / "sglang" / "version.py"
    git.run("checkout", "-q", "-b", "elsewhere")
    version.write_text(version.read_text() + "# one side\n")
    git.run("commit", "-qam", "one side")
    git.run("checkout", "-q", "main")
    version.write_text(version.read_text() + "# the other side\n")
    git.run("commit", "-qam", "the other side")
    assert git.try_run("cherry-pick", "elsewhere")[0] != 0
    before = run_state(tree)
    assert_refused(lab.sglpatch(*APPLY.argv(tree)), "a `git cherry-pick` is in progress", "CHERRY_PICK_HEAD")
    assert_refused(lab.sglpatch("recover", "--sglang", str(tree.target)), "a `git cherry-pick` is in progress")
    assert run_state(tree) == before
