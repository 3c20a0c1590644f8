"""Interrupt sglpatch at every write point and check that the target ends in a known state.

The toolkit calls `sglpatch.safety.interrupts.fault_point(label)` at each write. With
SGLPATCH_FAULT_TRACE=FILE a run lists the points it passes; with
SGLPATCH_FAULT_AT=N and SGLPATCH_FAULT_SIGNAL=INT|TERM|KILL it sends itself the
signal at the N-th. The harness counts the points of an uninterrupted run, then
for every point (or a sample) and signal runs the operation on a fresh copy of
its start tree and checks:

* SIGINT / SIGTERM: exit 128+signal, one line saying the state, and the tree is
  byte for byte that state;
* SIGKILL: the tree is one of the allowed states, or the next `apply` detects the
  interruption (refuses, writes nothing); then `recover` says which state and the
  tree is byte for byte that state; a second `recover` has nothing to do.

"The tree" of a run is everything an operation may write: the target, the series
folder it reads (a rebase rewrites it) and the report folder (the range-diff).

To add an operation: put an `Operation` in OPERATIONS; if it starts or ends in a
new state, add a builder to `Lab.builders` and a phrase to STATE_WORDS (what the
tool's messages say about that state).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from testing import git_cut
from testing.tree_bytes import tree_state

SIGNALS = ("INT", "TERM", "KILL")
DISK_FULL = "ENOSPC"  # as SGLPATCH_FAULT_SIGNAL: the disk is full at the N-th write point (sglpatch.safety.interrupts)
FULL_GRID = os.environ.get("SGLPATCH_FAULT_GRID") == "full"  # `make test-fault`: every write point
# The grid tests (marker `fault_grid`) are `make test-fault`'s; a plain pytest run of them takes a sample, and
# leaves SIGTERM to the full grid: the tool handles it exactly as SIGINT (interrupts.py).
GRID_SIGNALS = SIGNALS if FULL_GRID else ("INT", "KILL")
GRID_PROPERTY = "fault_grid"  # each grid test records its figures under this junit property
KINDS = ("checkout", "package")
PRISTINE, PATCHED = "pristine", "patched"
ONTO_RELEASE = "0.5.15"
REBASE_READY, REBASED = f"v0.5.14 with v{ONTO_RELEASE} fetched", f"rebased onto v{ONTO_RELEASE}"
# What the tool's messages say about each state (the last line of a recover, an interrupted run).
STATE_WORDS = {PRISTINE: "as it was", PATCHED: "fully patched", REBASE_READY: "as it was", REBASED: "fully patched"}
FIXED_DATE = "2026-07-02T08:00:00+00:00"  # committer date, so commits (and refs) are the same in every run


@dataclass(frozen=True)
class Run:
    """One tree: the target, and the series and report folders beside it."""

    root: Path
    target: Path

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def reports(self) -> Path:
        return self.root / "reports"


@dataclass(frozen=True)
class Operation:
    name: str
    argv: Callable[[Run], list[str]]  # sglpatch arguments for a run
    start: str  # state it starts from
    end: str  # state an uninterrupted run ends in
    allowed: tuple[str, ...] = (PRISTINE, PATCHED)  # states an interrupted run may end in, after recovery
    kinds: tuple[str, ...] = KINDS  # target kinds it works on


OPERATIONS = {
    "apply": Operation(
        "apply", lambda r: ["apply", "--sglang", str(r.target), "--patches", str(r.patches)], PRISTINE, PATCHED
    ),
    "revert": Operation("revert", lambda r: ["revert", "--sglang", str(r.target)], PATCHED, PRISTINE),
    "rebase": Operation(
        "rebase",
        lambda r: (
            ["rebase", "--sglang", str(r.target), "--patches", str(r.patches), "--report-dir", str(r.reports)]
            + ["--onto", f"v{ONTO_RELEASE}"]
        ),
        REBASE_READY,
        REBASED,
        allowed=(REBASE_READY, REBASED),
        kinds=("checkout",),
    ),
}
GRID = [(name, kind) for name in sorted(OPERATIONS) for kind in OPERATIONS[name].kinds]


def run_state(run: Run) -> dict[str, str]:
    """tree_state of each folder of a run that exists, keys prefixed with the folder's name."""
    state: dict[str, str] = {}
    for name, folder in (("target", run.target), ("patches", run.patches), ("reports", run.reports)):
        if folder.exists():
            state.update({f"{name}/{key}": value for key, value in tree_state(folder).items()})
    return state


def default_sigint() -> None:
    """In a child: SIGINT as a terminal's Ctrl-C delivers it. A shell starts background jobs (make in the
    background, some CI runners) with SIGINT ignored, and Python keeps it ignored; the tool would then
    never see the SIGINT the grid sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def copy_tree(src: Path, dest: Path) -> None:
    """A full copy (modes, links, times): `cp -a` is several times faster than shutil.copytree here."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)


def diff_states(got: dict[str, str], want: dict[str, str], limit: int = 6) -> str:
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return ", ".join(
        f"{k} ({'extra' if k not in want else 'missing' if k not in got else 'differs'})" for k in keys[:limit]
    )


@dataclass
class Result:
    tried: int = 0
    recovered: int = 0
    mid_way: int = 0  # SIGKILL runs that left the tree in neither state (recover had real work)
    failures: list[str] = field(default_factory=list)


def make_labs(tmp_path_factory, base_repo: Path, patches: Path, name: str) -> dict[str, Lab]:
    """One lab per target kind, in folders named `name-<kind>`: what each suite's module-wide `labs` fixture holds."""
    return {kind: Lab(kind, tmp_path_factory.mktemp(f"{name}-{kind}"), base_repo, patches) for kind in KINDS}


class Lab:
    """Trees of one kind (checkout or package) in each state, and sglpatch runs against copies of them."""

    def __init__(self, kind: str, workdir: Path, base_repo: Path, patches: Path):
        self.kind, self.workdir, self.base_repo, self.patches = kind, Path(workdir), base_repo, patches
        self._templates: dict[str, Run] = {}
        self._references: dict[str, dict[str, str]] = {}
        self._traces: dict[str, list[str]] = {}
        self._copies = 0
        self.last_mid_way = False
        self.builders: dict[str, Callable[[Path], None]] = {
            PRISTINE: self._build_pristine,
            PATCHED: lambda dest: self._build_by(OPERATIONS["apply"], dest),
            REBASE_READY: self._build_rebase_ready,
            REBASED: lambda dest: self._build_by(OPERATIONS["rebase"], dest),
        }

    # -- trees ---------------------------------------------------------------------

    def run_at(self, root: Path) -> Run:
        return Run(root, root / "sglang" if self.kind == "checkout" else root / "site-packages" / "sglang")

    def _build_pristine(self, dest: Path) -> None:
        run = self.run_at(dest)
        dest.mkdir()
        copy_tree(self.patches, run.patches)
        if self.kind == "checkout":
            subprocess.run(
                ["git", "clone", "-q", "--no-local", str(self.base_repo), str(run.target)], check=True, env=self.env()
            )
            for key, value in (("user.name", "Target User"), ("user.email", "target@example.com")):
                subprocess.run(["git", "config", key, value], cwd=run.target, check=True, env=self.env())
        else:
            run.target.parent.mkdir(parents=True, exist_ok=True)
            copy_tree(self.base_repo / "python" / "sglang", run.target)

    def _build_rebase_ready(self, dest: Path) -> None:
        """A pristine checkout that also holds the next release (tag v0.5.15), as after a `git fetch --tags`."""
        from sglpatch.git import Git
        from sglpatch.rebase.releases import release_commit

        self._build_pristine(dest)
        release_commit(ONTO_RELEASE, Git(self.run_at(dest).target))

    def _build_by(self, operation: Operation, dest: Path) -> None:
        copy_tree(self.template(operation.start).root, dest)
        result = self.sglpatch(*operation.argv(self.run_at(dest)))
        assert result.returncode == 0, result.stderr

    def template(self, state: str) -> Run:
        if state not in self._templates:
            dest = self.workdir / f"template-{state.replace(' ', '-')}"
            self.builders[state](dest)
            self._templates[state] = self.run_at(dest)
            self._references[state] = run_state(self._templates[state])
        return self._templates[state]

    def reference(self, state: str) -> dict[str, str]:
        self.template(state)
        return self._references[state]

    def fresh(self, state: str, where: Path | None = None) -> Run:
        """A copy of the `state` tree, in the lab's folder or in `where` (a small disk)."""
        self._copies += 1
        dest = (where or self.workdir) / f"run-{self._copies}"
        copy_tree(self.template(state).root, dest)
        return self.run_at(dest)

    def which_state(self, run: Run) -> str | None:
        now = run_state(run)
        return next((s for s in self._references if self._references[s] == now), None)

    # -- runs ------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        # GIT_CONFIG_GLOBAL stays: the suite's own (no identity, testing/sglang_trees.py), not the machine's
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GIT_", "SGLPATCH_FAULT")) or k == "GIT_CONFIG_GLOBAL"
        }
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_COMMITTER_DATE=FIXED_DATE, PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def sglpatch(self, *args: str, own_group: bool = False, **env: str) -> subprocess.CompletedProcess:
        """The CLI in a child process; `own_group` starts it in a process group of its own (a git cut kills
        that whole group, and a rebase's checkout runs the cut's filter for hundreds of files)."""
        return subprocess.run(
            [sys.executable, "-m", "sglpatch", *args],
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=600 if own_group else 120,
            preexec_fn=default_sigint,
            start_new_session=own_group,
        )

    def trace(self, operation: Operation) -> list[str]:
        """The write points an uninterrupted run passes; checks it ends in `operation.end`, byte for byte."""
        if operation.name not in self._traces:
            run = self.fresh(operation.start)
            trace_file = self.workdir / f"trace-{operation.name}.txt"
            result = self.sglpatch(*operation.argv(run), SGLPATCH_FAULT_TRACE=str(trace_file))
            assert result.returncode == 0, result.stderr
            assert run_state(run) == self.reference(operation.end), diff_states(
                run_state(run), self.reference(operation.end)
            )
            self._traces[operation.name] = trace_file.read_text().splitlines()
            shutil.rmtree(run.root)
        return self._traces[operation.name]

    def git_trace(self, operation: Operation) -> list[str]:
        """The points inside git's own writes to the target (testing/git_cut.py) that an uninterrupted run
        passes; checks it ends in `operation.end`, byte for byte, with the filter and hook in place."""
        key = f"git {operation.name}"
        if key not in self._traces:
            run = self.fresh(operation.start)
            trace_file = self.workdir / f"trace-git-{operation.name}.txt"
            result = self.sglpatch(*operation.argv(run), own_group=True, **self.git_cut_env(run, trace=trace_file))
            assert result.returncode == 0, result.stderr
            assert run_state(run) == self.reference(operation.end), diff_states(
                run_state(run), self.reference(operation.end)
            )
            self._traces[key] = trace_file.read_text().splitlines() if trace_file.exists() else []
            shutil.rmtree(run.root)
        return self._traces[key]

    def git_cut_env(self, run: Run, at: int = 0, trace: Path | None = None) -> dict[str, str]:
        """The environment of a run cut inside git at its `at`-th git write (0: none; `trace` lists them).
        The count is kept beside the run's folders, outside what `run_state` compares."""
        folder = self.workdir / "git-cut"
        if not folder.exists():
            git_cut.install(folder)
        return git_cut.environment(folder, run.target, run.root / "git-cut-count", trace=trace, at=at)

    # -- one interruption --------------------------------------------------------------

    def interrupt_in_git(self, operation: Operation, point: int) -> str | None:
        """Kill `operation` (its whole process group) at the `point`-th write inside git; None when recovered.
        The next apply and recover run before the killed run is reaped (`cut_in_git`)."""
        for state in operation.allowed:
            self.reference(state)
        run = self.fresh(operation.start)
        try:
            with self.cut_in_git(operation, run, point) as killed:
                if killed.signal != signal.SIGKILL:
                    return f"expected death by SIGKILL inside git, got {killed.describe()}"
                return self._after_kill(operation, run)
        finally:
            shutil.rmtree(run.root, ignore_errors=True)

    @contextmanager
    def cut_in_git(self, operation: Operation, run: Run, point: int):
        """Run `operation` on `run` in a process group of its own, cut (the whole group killed) at its `point`-th
        write inside git; yields once it is dead but not yet reaped, as a run killed by an OOM kill or a
        supervisor stays until its parent collects it: its pid and start time are still in /proc."""
        output = run.root / "killed-run-output"
        with open(output, "wb") as sink:
            child = subprocess.Popen(
                [sys.executable, "-m", "sglpatch", *operation.argv(run)],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                env=self.env(**self.git_cut_env(run, at=point)),
                preexec_fn=default_sigint,
                start_new_session=True,
            )
        try:
            info = _wait_unreaped(child.pid, timeout_s=600)
            by_signal = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
            yield Killed(info.si_status if by_signal else 0, info.si_status, output.read_bytes())
        finally:
            child.kill()
            child.wait()
            output.unlink(missing_ok=True)

    def interrupt(self, operation: Operation, point: int, sig: str) -> str | None:
        """Interrupt `operation` at write point `point` with `sig`; None when recovered, else what went wrong."""
        for state in operation.allowed:
            self.reference(state)
        run = self.fresh(operation.start)
        try:
            return self._interrupt(operation, run, point, sig)
        finally:
            shutil.rmtree(run.root, ignore_errors=True)

    def _interrupt(self, operation: Operation, run: Run, point: int, sig: str) -> str | None:
        result = self.sglpatch(*operation.argv(run), SGLPATCH_FAULT_AT=str(point), SGLPATCH_FAULT_SIGNAL=sig)
        self.last_mid_way = False
        if sig == DISK_FULL:
            return self.after_disk_full(operation, run, result)
        signum = signal.Signals[f"SIG{sig}"]
        if sig == "KILL":
            if result.returncode != -signum:
                return f"expected death by SIGKILL, got exit {result.returncode}: {result.stderr.strip()[-300:]}"
            return self._after_kill(operation, run)
        if result.returncode != 128 + signum:
            return f"expected exit {128 + signum}, got {result.returncode}: {result.stderr.strip()[-300:]}"
        lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("... ")]  # not progress
        if len(lines) != 1 or f"interrupted by SIG{sig}" not in lines[0]:
            return f"expected one 'interrupted by SIG{sig}' line, got {result.stderr.strip()!r}"
        said = self._said(lines[0], operation)
        if said not in operation.allowed or self.which_state(run) != said:
            return f"said {said!r} ({lines[0]!r}) but the tree is {self._describe(run, said, operation)}"
        return self._recover(operation, run, first=False)

    def _after_kill(self, operation: Operation, run: Run) -> str | None:
        """A killed run: the next apply refuses without writing, unless the tree is in an allowed state; then
        recover names the state the tree is in, byte for byte, and a second recover has nothing to do."""
        self.last_mid_way = False
        if self.which_state(run) not in operation.allowed:
            self.last_mid_way = True
            before = run_state(run)
            probe = self.sglpatch(*OPERATIONS["apply"].argv(run))
            if probe.returncode != 2 or "was interrupted" not in probe.stderr:
                return f"next apply did not detect the interruption: exit {probe.returncode}, {probe.stderr.strip()}"
            if run_state(run) != before:
                return "the next apply, refusing, still changed the tree"
        return self._recover(operation, run, first=True) or self._recover(operation, run, first=False)

    def _recover(self, operation: Operation, run: Run, first: bool) -> str | None:
        result = self.sglpatch("recover", "--sglang", str(run.target))
        if result.returncode != 0:
            return f"recover failed ({result.returncode}): {result.stderr.strip()}"
        last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        said = self._said(last, operation)
        if said not in operation.allowed or self.which_state(run) != said:
            return f"recover said {last!r} but the tree is {self._describe(run, said, operation)}"
        if not first and "nothing to recover" not in last:
            return f"recover had work to do on a tree that should need none: {last!r}"
        return None

    def after_disk_full(
        self, operation: Operation, run: Run, result: subprocess.CompletedProcess, named: bool = False
    ) -> str | None:
        """After a run the disk ran out under (space is back now): exit 0 and its end state, or one line, exit 2,
        naming the state the tree is in byte for byte (or, unless `named`, saying recover finishes it, which it
        then must); a rebase may stop for the user instead, and `--continue` then finishes it. None when all
        holds."""
        if result.returncode == 0:
            if self.which_state(run) != operation.end:
                return f"exit 0, but the tree is {self._describe(run, operation.end, operation)}"
            return self._recover(operation, run, first=False)
        lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("... ")]
        if result.returncode not in (1, 2) or len(lines) != 1 or "Traceback" in result.stderr:
            return f"expected one line and exit 2, got exit {result.returncode}: {result.stderr.strip()[-400:]!r}"
        said = self._said(lines[0], operation)
        if said is not None:
            if self.which_state(run) != said:
                return f"said {said!r} ({lines[0]!r}) but the tree is {self._describe(run, said, operation)}"
            return self._recover(operation, run, first=False)
        self.last_mid_way = True
        if named:
            return f"left part-way, in neither state ({self._describe(run, None, operation)}): {lines[0]!r}"
        if operation.name == "rebase" and "the rebase is stopped" in lines[0]:
            resumed = self.sglpatch("rebase", "--sglang", str(run.target), "--continue")
            if resumed.returncode != 0 or self.which_state(run) != operation.end:
                return f"stopped ({lines[0]!r}); --continue: exit {resumed.returncode} {resumed.stderr.strip()!r}"
            return self._recover(operation, run, first=False)
        if "recover" not in lines[0]:
            return f"says neither where the tree stands nor what to run: {lines[0]!r}"
        return self._recover(operation, run, first=True) or self._recover(operation, run, first=False)

    # -- a real full disk ----------------------------------------------------------------

    def space_trace(self, operation: Operation, disk) -> list[int]:
        """Bytes an uninterrupted run on `disk` has taken at each of its write points, then at its end."""
        key = f"{operation.name} on a small disk"
        if key not in self._traces:
            run = self.fresh(operation.start, where=disk.root)
            disk.free()
            trace_file = self.workdir / f"trace-{operation.name}-space.txt"
            free_before = disk.available()
            result = self.sglpatch(
                *operation.argv(run), SGLPATCH_FAULT_TRACE=str(trace_file), SGLPATCH_FAULT_SPACE=str(disk.root)
            )
            assert result.returncode == 0, result.stderr
            taken = [free_before - int(line.rsplit("\t", 1)[1]) for line in trace_file.read_text().splitlines()]
            self._traces[key] = [*taken, free_before - disk.available()]
            shutil.rmtree(run.root)
        return self._traces[key]

    def run_out_of_space(self, operation: Operation, disk, leave: int, named: bool = False) -> str | None:
        """Run `operation` on a copy of its start tree on `disk` with `leave` bytes free, then `recover` while
        the disk is still full (it must not call the tree what it is not); free the space; check the outcome
        as `after_disk_full` does."""
        for state in operation.allowed:
            self.reference(state)
        run = self.fresh(operation.start, where=disk.root)
        try:
            if self.kind == "checkout":  # a copy's index has stale stat data: refresh it, as a user's is
                subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=run.target, env=self.env())
            disk.fill(leave)
            try:
                result = self.sglpatch(*operation.argv(run))
                before = run_state(run)
                problem = self._recover_on_a_full_disk(operation, run) if result.returncode else None
            finally:
                disk.free()
            if problem:
                return problem
            self.last_mid_way = False
            if result.returncode and run_state(run) != before:  # recover finished the job: judge that
                return self._recover(operation, run, first=False)
            return self.after_disk_full(operation, run, result, named=named)
        finally:
            shutil.rmtree(run.root, ignore_errors=True)

    def _recover_on_a_full_disk(self, operation: Operation, run: Run) -> str | None:
        """`recover` with no room: it may finish or refuse, but what it says must be what the tree is."""
        result = self.sglpatch("recover", "--sglang", str(run.target))
        out = (result.stdout.strip().splitlines() or [""])[-1] if result.returncode == 0 else result.stderr.strip()
        if "Traceback" in result.stderr or len(out.splitlines()) != 1:
            return f"recover on a full disk: exit {result.returncode}, {result.stderr.strip()[-300:]!r}"
        said = self._said(out, operation)
        if said is not None and self.which_state(run) != said:
            return f"recover on a full disk said {out!r} but the tree is {self._describe(run, said, operation)}"
        return None

    def _describe(self, run: Run, said: str | None, operation: Operation) -> str:
        got = self.which_state(run)
        return got or "in neither state: " + diff_states(run_state(run), self.reference(said or operation.start))

    @staticmethod
    def _said(line: str, operation: Operation) -> str | None:
        """The state a message names, among those the operation may end in."""
        found = [state for state in operation.allowed if STATE_WORDS[state] in line]
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Killed:
    """How a run cut inside git ended: the signal that killed it (0 when it exited), its exit status, its output."""

    signal: int
    status: int
    output: bytes

    def describe(self) -> str:
        how = f"signal {self.signal}" if self.signal else f"exit {self.status}"
        return f"{how}: {self.output.decode(errors='replace').strip()[-300:]}"


def _wait_unreaped(pid: int, timeout_s: float):
    """Wait for child `pid` to end, leaving it unreaped (a zombie); its waitid record."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} still runs after {timeout_s} s")
        time.sleep(0.02)


def sample_points(count: int, sig: str, full: bool) -> list[int]:
    """Every point for the full grid; else one point per signal: the middle one for SIGKILL and a full disk
    (a half-written tree), a third of the way for SIGINT."""
    if full or count <= 1:
        return list(range(1, count + 1))
    if sig in ("KILL", DISK_FULL):
        return [(count + 1) // 2]
    return [max(1, count // 3)] if sig == "INT" else [max(1, (2 * count) // 3)]


def git_points(labels: list[str], full: bool) -> list[int]:
    """Where to cut inside git. The sample: the middle point. The full grid: every ref lock,
    and of each git command's file writes (a rebase's `git checkout` writes hundreds) the first, middle and
    last, as the files between them leave the same kind of half-switched tree."""
    if not full:
        return sample_points(len(labels), "KILL", full=False)
    chosen, writes = [], {}
    for number, line in enumerate(labels, 1):
        label = line.split("\t", 1)[-1]
        if label.endswith("(smudge)"):
            writes.setdefault(label.split("`: ", 1)[0], []).append(number)
        else:
            chosen.append(number)
    for numbers in writes.values():
        chosen += [numbers[0], numbers[(len(numbers) - 1) // 2], numbers[-1]]
    return sorted(set(chosen))


def run_git_grid(lab: Lab, operation: Operation, full: bool) -> Result:
    """SIGKILL inside git's own writes to the target, at the points `git_points` picks."""
    labels = lab.git_trace(operation)
    return _cut_at(lab, labels, git_points(labels, full), lambda point: lab.interrupt_in_git(operation, point))


def run_grid(lab: Lab, operation: Operation, sig: str, full: bool) -> Result:
    labels = lab.trace(operation)
    points = sample_points(len(labels), sig, full)
    return _cut_at(lab, labels, points, lambda point: lab.interrupt(operation, point, sig))


def _cut_at(lab: Lab, labels: list[str], points: list[int], interrupt: Callable[[int], str | None]) -> Result:
    return _tally(lab, points, interrupt, lambda point: f"point {point} ({labels[point - 1]})")


def _tally(lab: Lab, cases: list[int], run_one: Callable[[int], str | None], where: Callable[[int], str]) -> Result:
    """``run_one`` each case (it returns the problem, or None where the target came out right), counted into
    a Result: tried, recovered, left mid-way, and each failure named by ``where(case)``."""
    result = Result()
    for case in cases:
        result.tried += 1
        problem = run_one(case)
        result.mid_way += lab.last_mid_way
        if problem is None:
            result.recovered += 1
        else:
            result.failures.append(f"{where(case)}: {problem}")
    return result


def space_levels(taken: list[int], full: bool, page: int = 4096) -> list[int]:
    """Free space to leave on a disk so that a run runs out between two of its write points, one level per
    point where it takes space (several inside a large step, such as a `git checkout`, in the full grid),
    and none at all; in the sample, the last (inside its last step that takes space: for a checkout apply,
    the `git checkout` itself)."""
    levels, before = {0}, 0
    for now in taken:
        if now > before + page:
            parts = min(4, (now - before) // (64 * 1024)) + 1 if full else 1
            levels |= {(before + (now - before) * (i + 1) // (parts + 1)) // page * page for i in range(parts)}
        before = max(before, now)
    ordered = sorted(levels)
    return ordered if full else ordered[-1:]


def run_full_disk_grid(lab: Lab, operation: Operation, disk, full: bool) -> Result:
    """`operation` on a real small disk, filled to run out at each level `space_levels` names."""
    levels = space_levels(lab.space_trace(operation, disk), full)
    return _tally(
        lab,
        levels,
        lambda leave: lab.run_out_of_space(operation, disk, leave),
        lambda leave: f"{leave // 1024} KiB free",
    )
