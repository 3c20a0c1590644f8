"""Interruptions: what Ctrl-C, SIGTERM and a kill do to a run that writes.

`guarded` wraps a command: SIGINT or SIGTERM make it exit (130 / 143) with one
line on stderr saying what state the target is in. `write_phase` wraps the part
that writes: SIGINT and SIGTERM are blocked (git children started there inherit
the mask) until every write of the step is done, then acted on by `guarded`; so
they never cut a step in half. SIGKILL cannot be held back: every write
is ordered so that `sglpatch recover` can finish or undo what was cut short.

`fault_point` is the test hook at each write: with SGLPATCH_FAULT_AT=N the
process sends itself SGLPATCH_FAULT_SIGNAL (KILL, TERM, INT, or STOP to pause
it) at the N-th point it passes, or with SGLPATCH_FAULT_SIGNAL=ENOSPC raises
the OSError a full disk gives (the next write fails: each point follows a
write); with SGLPATCH_FAULT_TRACE=FILE it appends each point's label to FILE
(and, with SGLPATCH_FAULT_SPACE=DIR, the free bytes of DIR's file system there,
so a test can fill a disk to run out between two points). Unset, it is one test
of a module constant.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from contextlib import contextmanager

from sglpatch.output import one_line

_HELD = {signal.SIGINT, signal.SIGTERM}
_outcome = "nothing was changed"


class _Terminated(KeyboardInterrupt):
    pass


def _on_sigterm(signum, frame):
    raise _Terminated()


@contextmanager
def guarded(command: str, target: str):
    """SIGINT/SIGTERM during `command` end it with exit 128+signal and a line saying where `target` stands."""
    global _outcome
    _outcome = f"nothing was changed: {target} is as it was"
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    try:
        yield
    except KeyboardInterrupt as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        _exit_interrupted(command, signum)
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)


@contextmanager
def write_phase(done: str | None = None):
    """Hold SIGINT/SIGTERM back while the block writes; `done` says the result if one came meanwhile
    (None: the caller settles an interruption itself and says where things stand)."""
    global _outcome
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
        if done is not None:
            _outcome = done
    finally:
        # Unblocking runs the handler of a signal held back meanwhile at once: `guarded` reports it.
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _exit_interrupted(command: str, signum: int):
    name = signal.Signals(signum).name
    print(one_line(f"sglpatch {command}: interrupted by {name}; {_outcome}"), file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


# -- fault injection (tests) ---------------------------------------------------------

_FAULT_AT = int(_at) if (_at := os.environ.get("SGLPATCH_FAULT_AT", "")).isdigit() else 0
_FAULT_TRACE = os.environ.get("SGLPATCH_FAULT_TRACE") or None
_ACTIVE = bool(_FAULT_AT or _FAULT_TRACE)
_passed = 0
DISK_FULL = "ENOSPC"  # SGLPATCH_FAULT_SIGNAL value: a full disk at the N-th point, not a signal


def fault_point(label: str) -> None:
    """A write point: see the module docstring. Costs one global lookup when no fault is asked for."""
    if _ACTIVE:
        _hit(label)


def _hit(label: str) -> None:
    global _passed
    _passed += 1
    if _FAULT_TRACE:
        space = os.environ.get("SGLPATCH_FAULT_SPACE")
        free = f"\t{os.statvfs(space).f_bavail * os.statvfs(space).f_frsize}" if space else ""
        with open(_FAULT_TRACE, "a", encoding="utf-8") as trace:
            trace.write(f"{_passed}\t{label}{free}\n")
    if _passed == _FAULT_AT:
        name = os.environ.get("SGLPATCH_FAULT_SIGNAL", "KILL").upper()
        if name == DISK_FULL:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.kill(os.getpid(), signal.Signals[f"SIG{name}"])
