"""Two sglpatch runs on one target at once (real processes): one refuses, the tree is never mixed.

The overlap is made deterministic, not timed: the first run stops itself
(SIGSTOP through the fault hook) in the middle of its writes, holding the lock;
the test waits for that stop with waitpid(WUNTRACED), runs the second command,
then lets the first one finish.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from testing.fault_harness import OPERATIONS, PATCHED, PRISTINE, default_sigint, make_labs, run_state


@pytest.fixture(scope="module")
def labs(tmp_path_factory, base_repo, series_dir):
    return make_labs(tmp_path_factory, base_repo, series_dir, "conc")


def _spellings(kind, target):
    """Another path to the same target: the site-packages folder, or a symbolic link to the checkout."""
    if kind == "package":
        return target.parent
    link = target.parent / (target.name + "-link")
    link.symlink_to(target)
    return link


def _start(lab, *args, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "sglpatch", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
        env=lab.env(**env),
    )


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_second_run_is_refused_while_the_first_is_mid_write(labs, kind):
    lab = labs[kind]
    apply = OPERATIONS["apply"]
    points = len(lab.trace(apply))
    tree = lab.fresh(PRISTINE)
    first = _start(lab, *apply.argv(tree), SGLPATCH_FAULT_AT=str(points // 2), SGLPATCH_FAULT_SIGNAL="STOP")
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the first run ended instead of stopping mid-write"
        mid_write = run_state(tree)
        other = replace(tree, target=_spellings(kind, tree.target))
        for command in (apply.argv(other), ["revert", "--sglang", other.target], ["recover", "--sglang", other.target]):
            second = lab.sglpatch(*map(str, command))
            assert second.returncode == 2, (command, second.stdout, second.stderr)
            assert len(second.stderr.strip().splitlines()) == 1, second.stderr
            assert "another sglpatch run is working on" in second.stderr and str(first.pid) in second.stderr
            assert run_state(tree) == mid_write, f"{command[0]} changed a tree another run holds"
    finally:
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert out.startswith("applied "), out
    assert lab.which_state(tree) == PATCHED


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


def outcome_of_the_other(code: int, out: str, err: str, winner_pid: int) -> str:
    """What the run that did not apply saw: "refused" (naming the pid of the run that applied) or "after"
    (it found the series applied). Anything else fails: a refusal naming another process, a traceback, a
    second line, a success that says something else."""
    assert "Traceback" not in out + err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert "another sglpatch run is working on" in err, err
        assert f"(pid {winner_pid})" in err, f"the refusal does not name the run that applied ({winner_pid}): {err}"
        return "refused"
    assert code == 0 and _last_line(out).startswith("already applied"), (code, out, err)
    return "after"


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_two_applies_started_together_leave_one_patched_tree(labs, kind, record_property):
    lab = labs[kind]
    lab.reference(PATCHED)
    outcomes = []
    for _ in range(3):
        tree = lab.fresh(PRISTINE)
        spellings = (tree, replace(tree, target=_spellings(kind, tree.target)))
        runs = [_start(lab, *OPERATIONS["apply"].argv(t)) for t in spellings]
        results = [(run.pid, *run.communicate(timeout=120), run.returncode) for run in runs]
        applied = [r for r in results if r[3] == 0 and _last_line(r[1]).startswith("applied ")]
        assert len(applied) == 1, results
        winner_pid = applied[0][0]
        [(_, out, err, code)] = [r for r in results if r[0] != winner_pid]
        outcomes.append(outcome_of_the_other(code, out, err, winner_pid))
        assert lab.which_state(tree) == PATCHED
    record_property("concurrent_outcomes", ",".join(outcomes))


@pytest.mark.parametrize("left_before", ["", "4194305\n", "4194305\n77"], ids=["empty", "gone", "half-written"])
def test_a_refusal_names_the_holder_that_has_not_written_its_pid_yet(tmp_path, left_before):
    """Between taking the lock and writing its pid, a holder's lock file still holds what the run before it
    left (a pid past pid_max here: a process that is gone), or nothing. The refusal named that, or "pid
    unknown" (seen once in 3 x 3 started-together applies on a RAM disk); it must name the live holder."""
    from sglpatch.targets.target import _lock_holder

    lock = tmp_path / "target.lock"
    lock.write_text(left_before)
    holder = subprocess.Popen([sys.executable, "-c", _LATE_WRITER, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    fd = os.open(lock, os.O_RDWR)
    try:
        assert _lock_holder(fd, patience_s=10) == str(holder.pid)
    finally:
        os.close(fd)
        holder.communicate(timeout=30)


_LATE_WRITER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(0.3)
mine = f"{os.getpid()}\\n".encode()
os.pwrite(fd, mine, 0)
os.ftruncate(fd, len(mine))
time.sleep(1)
"""
