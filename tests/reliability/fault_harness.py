"""Interrupt sglpatch at every write point and check that the target ends in a known state.

The toolkit calls `sglpatch.interrupts.fault_point(label)` at each write. With
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

To add an operation (e.g. rebase): put an `Operation` in OPERATIONS; if it starts
or ends in a new state, add a builder to `Lab.builders` and a phrase to
STATE_WORDS (what the tool's messages say about that state).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SIGNALS = ("INT", "TERM", "KILL")
KINDS = ("checkout", "package")
PRISTINE, PATCHED = "pristine", "patched"
# What the tool's messages say about each state (the last line of a recover, an interrupted run).
STATE_WORDS = {PRISTINE: "as it was", PATCHED: "fully patched"}
FIXED_DATE = "2026-07-02T08:00:00+00:00"  # committer date, so commits (and refs) are the same in every run


@dataclass(frozen=True)
class Operation:
    name: str
    argv: Callable[[Path, Path], list[str]]  # (target, patches) -> sglpatch arguments
    start: str  # state it starts from
    end: str  # state an uninterrupted run ends in
    allowed: tuple[str, ...] = (PRISTINE, PATCHED)  # states an interrupted run may end in, after recovery


OPERATIONS = {
    "apply": Operation("apply", lambda t, p: ["apply", "--sglang", str(t), "--patches", str(p)], PRISTINE, PATCHED),
    "revert": Operation("revert", lambda t, p: ["revert", "--sglang", str(t)], PATCHED, PRISTINE),
}


def tree_state(root: Path) -> dict[str, str]:
    """Byte-for-byte state of a tree: every file (content and mode), folder and link.

    In a git checkout, .git/objects and .git/logs are left out (unreachable objects
    and reflog lines are history, not state) and the index is compared by its
    entries (`git ls-files -s`), not its stat cache; every other file in .git
    counts, so a ref, a lock file or a state file left behind shows.
    """
    state: dict[str, str] = {}
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        in_git = rel_dir.parts[:1] == (".git",)
        if rel_dir.parts[:2] in ((".git", "objects"), (".git", "logs")):
            dirnames[:] = []
            continue
        for name in dirnames:
            path = here / name
            if path.is_symlink():
                state[str(rel_dir / name)] = f"link:{os.readlink(path)}"
            elif not in_git and str(rel_dir / name) != ".git":
                state[str(rel_dir / name)] = "dir"
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
        for name in filenames:
            path = here / name
            rel = str(rel_dir / name)
            if rel == ".git/index":
                continue
            info = path.lstat()
            if path.is_symlink():
                state[rel] = f"link:{os.readlink(path)}"
            else:
                state[rel] = f"{info.st_mode & 0o7777:o}:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    if (root / ".git").is_dir():
        listed = subprocess.run(["git", "ls-files", "-s"], cwd=root, capture_output=True, check=True).stdout
        state[".git/index (entries)"] = hashlib.sha256(listed).hexdigest()
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


class Lab:
    """Trees of one kind (checkout or package) in each state, and sglpatch runs against copies of them."""

    def __init__(self, kind: str, workdir: Path, base_repo: Path, patches: Path):
        self.kind, self.workdir, self.base_repo, self.patches = kind, Path(workdir), base_repo, patches
        self._templates: dict[str, Path] = {}
        self._references: dict[str, dict[str, str]] = {}
        self._traces: dict[str, list[str]] = {}
        self._copies = 0
        self.last_mid_way = False
        self.builders: dict[str, Callable[[Path], None]] = {
            PRISTINE: self._build_pristine,
            PATCHED: lambda dest: self._build_by(OPERATIONS["apply"], dest),
        }

    # -- trees ---------------------------------------------------------------------

    def target_of(self, tree: Path) -> Path:
        return tree if self.kind == "checkout" else tree / "site-packages" / "sglang"

    def _build_pristine(self, dest: Path) -> None:
        if self.kind == "checkout":
            subprocess.run(
                ["git", "clone", "-q", "--no-local", str(self.base_repo), str(dest)], check=True, env=self.env()
            )
            for key, value in (("user.name", "Target User"), ("user.email", "target@example.com")):
                subprocess.run(["git", "config", key, value], cwd=dest, check=True, env=self.env())
        else:
            shutil.copytree(self.base_repo / "python" / "sglang", self.target_of(dest), symlinks=True)

    def _build_by(self, operation: Operation, dest: Path) -> None:
        copy_tree(self.template(operation.start), dest)
        result = self.sglpatch(*operation.argv(self.target_of(dest), self.patches))
        assert result.returncode == 0, result.stderr

    def template(self, state: str) -> Path:
        if state not in self._templates:
            dest = self.workdir / f"template-{state}"
            self.builders[state](dest)
            self._templates[state] = dest
            self._references[state] = tree_state(self.target_of(dest))
        return self._templates[state]

    def reference(self, state: str) -> dict[str, str]:
        self.template(state)
        return self._references[state]

    def fresh(self, state: str) -> Path:
        self._copies += 1
        dest = self.workdir / f"run-{self._copies}"
        copy_tree(self.template(state), dest)
        return self.target_of(dest)

    def which_state(self, target: Path) -> str | None:
        now = tree_state(target)
        return next((s for s in self._references if self._references[s] == now), None)

    # -- runs ------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SGLPATCH_FAULT"))}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_COMMITTER_DATE=FIXED_DATE, PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def sglpatch(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sglpatch", *args],
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=120,
            preexec_fn=default_sigint,
        )

    def trace(self, operation: Operation) -> list[str]:
        """The write points an uninterrupted run passes; checks it ends in `operation.end`, byte for byte."""
        if operation.name not in self._traces:
            target = self.fresh(operation.start)
            trace_file = self.workdir / f"trace-{operation.name}.txt"
            result = self.sglpatch(*operation.argv(target, self.patches), SGLPATCH_FAULT_TRACE=str(trace_file))
            assert result.returncode == 0, result.stderr
            assert tree_state(target) == self.reference(operation.end), diff_states(
                tree_state(target), self.reference(operation.end)
            )
            self._traces[operation.name] = trace_file.read_text().splitlines()
            shutil.rmtree(target.parent.parent if self.kind == "package" else target)
        return self._traces[operation.name]

    # -- one interruption --------------------------------------------------------------

    def interrupt(self, operation: Operation, point: int, sig: str) -> str | None:
        """Interrupt `operation` at write point `point` with `sig`; None when recovered, else what went wrong."""
        for state in operation.allowed:
            self.reference(state)
        target = self.fresh(operation.start)
        try:
            return self._interrupt(operation, target, point, sig)
        finally:
            shutil.rmtree(target.parent.parent if self.kind == "package" else target, ignore_errors=True)

    def _interrupt(self, operation: Operation, target: Path, point: int, sig: str) -> str | None:
        signum = signal.Signals[f"SIG{sig}"]
        run = self.sglpatch(
            *operation.argv(target, self.patches), SGLPATCH_FAULT_AT=str(point), SGLPATCH_FAULT_SIGNAL=sig
        )
        self.last_mid_way = False
        if sig == "KILL":
            if run.returncode != -signum:
                return f"expected death by SIGKILL, got exit {run.returncode}: {run.stderr.strip()[-300:]}"
            if self.which_state(target) not in operation.allowed:
                self.last_mid_way = True
                before = tree_state(target)
                probe = self.sglpatch(*OPERATIONS["apply"].argv(target, self.patches))
                if probe.returncode != 2 or "was interrupted" not in probe.stderr:
                    return (
                        f"next apply did not detect the interruption: exit {probe.returncode}, {probe.stderr.strip()}"
                    )
                if tree_state(target) != before:
                    return "the next apply, refusing, still changed the tree"
            return self._recover(operation, target, first=True) or self._recover(operation, target, first=False)
        if run.returncode != 128 + signum:
            return f"expected exit {128 + signum}, got {run.returncode}: {run.stderr.strip()[-300:]}"
        lines = run.stderr.strip().splitlines()
        if len(lines) != 1 or f"interrupted by SIG{sig}" not in lines[0]:
            return f"expected one 'interrupted by SIG{sig}' line, got {run.stderr.strip()!r}"
        said = self._said(lines[0])
        if said not in operation.allowed or self.which_state(target) != said:
            got = self.which_state(target)
            detail = "" if got else ": " + diff_states(tree_state(target), self.reference(said or PRISTINE))
            return f"said {said!r} ({lines[0]!r}) but the tree is {got or 'in neither state'}{detail}"
        return self._recover(operation, target, first=False)

    def _recover(self, operation: Operation, target: Path, first: bool) -> str | None:
        result = self.sglpatch("recover", "--sglang", str(target))
        if result.returncode != 0:
            return f"recover failed ({result.returncode}): {result.stderr.strip()}"
        last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        said = self._said(last)
        got = self.which_state(target)
        if said not in operation.allowed or got != said:
            detail = "" if got else ": " + diff_states(tree_state(target), self.reference(said or PRISTINE))
            return f"recover said {last!r} but the tree is {got or 'in neither state'}{detail}"
        if not first and "nothing to recover" not in last:
            return f"recover had work to do on a tree that should need none: {last!r}"
        return None

    @staticmethod
    def _said(line: str) -> str | None:
        found = [state for state, words in STATE_WORDS.items() if words in line]
        return found[0] if len(found) == 1 else None


def sample_points(count: int, sig: str, full: bool) -> list[int]:
    """Every point for the full grid; else a fixed spread (first, last and one between for SIGKILL)."""
    if full or count <= 1:
        return list(range(1, count + 1))
    if sig == "KILL":
        return sorted({1, (count + 1) // 2, count})
    return [max(1, count // 3)] if sig == "INT" else [max(1, (2 * count) // 3)]


def run_grid(lab: Lab, operation: Operation, sig: str, full: bool) -> Result:
    labels = lab.trace(operation)
    result = Result()
    for point in sample_points(len(labels), sig, full):
        result.tried += 1
        problem = lab.interrupt(operation, point, sig)
        result.mid_way += lab.last_mid_way
        if problem is None:
            result.recovered += 1
        else:
            result.failures.append(f"point {point} ({labels[point - 1]}): {problem}")
    return result
