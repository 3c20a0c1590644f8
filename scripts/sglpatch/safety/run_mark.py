"""Which sglpatch run wrote something, and whether that run is still alive.

A state file written before a git call names the run (`RunMark`: its pid and the
start time the kernel gives that pid), so a later `recover` can tell a lock or a
scratch folder left by a run that was killed from one of a run still working.
The start time tells a reused pid apart from the run itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


def process_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks after boot), or None when there is no such process
    or this system has no /proc to read it from."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]; [] when there is none."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return []
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    return stat[stat.rfind(")") + 2 :].split()


def dead_but_listed(pid: int) -> bool:
    """A process killed whose parent has not collected it yet (a zombie, or one being torn down): it runs
    nothing, holds no file open and no lock, yet /proc still lists it under its pid and start time."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in ("Z", "X", "x")


@dataclass(frozen=True)
class RunMark:
    pid: int
    start: int | None  # None where /proc cannot be read: then only the pid is compared

    @classmethod
    def current(cls) -> RunMark:
        return cls(os.getpid(), process_start(os.getpid()))

    def alive(self) -> bool:
        if dead_but_listed(self.pid):
            return False
        if self.start is not None and _PROC.is_dir():
            return process_start(self.pid) == self.start
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def label(self) -> str:
        """The mark as one word, for file names: `PID.START`."""
        return f"{self.pid}.{self.start if self.start is not None else 0}"

    @classmethod
    def from_label(cls, text: str) -> RunMark | None:
        pid, _, start = text.partition(".")
        if not (pid.isdigit() and start.isdigit()):
            return None
        return cls(int(pid), int(start) or None)

    def to_json(self) -> dict:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, data) -> RunMark:
        if not (isinstance(data, dict) and _is_int(data.get("pid"))):
            raise ValueError("run is not a pid record")
        start = data.get("start")
        if start is not None and not _is_int(start):
            raise ValueError("run start is not a number")
        return cls(data["pid"], start)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
