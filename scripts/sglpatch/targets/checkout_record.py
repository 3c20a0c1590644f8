"""The record sglpatch keeps in a git checkout it patched: .git/sglpatch-state.json, as a `CheckoutRecord`.

It names the series branch, the branch it was made from ("previous"), the head
commit and the files the series touches. Its "state" is written "applying"
before the first write to the checkout and "applied" after the last; revert
writes "reverting" first and deletes the file last. No "state" means applied.
A rebase that finishes writes one too (the rebased branch), keeping the record
it replaced under "before", so a revert goes back one step at a time; so does an
apply of a second series onto the branch of the first (a stack).

While a state is "applying" or "reverting" the record names the run that wrote
it ("run": pid and start time), so `recover` can tell the git locks a killed run
left from those of a git still running. "series", "base" and "three_way" say
what was applied onto what, for `status` to report a 3-way apply it cannot replay.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglpatch.safety.durable import unlink_if_there, write_durably
from sglpatch.safety.run_mark import RunMark
from sglpatch.series import check_path_is_safe
from sglpatch.targets._record_file import load_json_record
from sglpatch.targets.ownership import GIT_FILES, give_to_folder_owner
from sglpatch.targets.target import Target
from sglpatch.targets.write_states import INTERRUPTED, WriteState

# a git object id: SHA-1, or SHA-256 in a repository that uses it
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

STATE_FILE = "sglpatch-state.json"


@dataclass(frozen=True)
class CheckoutRecord:
    branch: str  # the series branch
    previous: str  # the branch (or commit) the series was applied from
    head: str | None = None  # the series branch's last commit
    state: WriteState = WriteState.APPLIED
    patches: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    rebased_onto: str | None = None  # set by a rebase: the ONTO it was asked for
    before: CheckoutRecord | None = None  # the record it replaced (a rebase, or a stacked apply)
    series: str | None = None  # the digest of the series applied
    base: str | None = None  # the commit the series was applied onto
    three_way: bool = False  # applied with --3way onto a base that differs from the pin
    run: RunMark | None = None  # the run writing it, while applying or reverting
    worktree: dict[str, str] = field(default_factory=dict)  # blob of each touched file's bytes before the apply
    stats: dict[str, list[int]] = field(default_factory=dict)  # [mode, uid, gid] of each touched file before it
    git_stats: dict[str, list[int]] = field(default_factory=dict)  # the same for HEAD, the index, packed-refs

    def with_state(self, state: WriteState) -> CheckoutRecord:
        return replace(self, state=state)

    @property
    def stack(self) -> list[CheckoutRecord]:
        """This record and the ones it replaced, newest first."""
        return [self] + (self.before.stack if self.before else [])

    @classmethod
    def from_json(cls, data) -> CheckoutRecord:
        """The record a JSON object holds; ValueError naming what is wrong."""
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("branch", "previous")):
            raise ValueError("missing branch or previous")
        for key in ("branch", "previous"):  # handed to git as arguments: never empty, never an option
            if not data[key] or data[key].startswith("-") or any(c.isspace() for c in data[key]):
                raise ValueError(f"{key} {data[key][:60]!r} is not a branch or commit name")
        if data.get("state", WriteState.APPLIED) not in tuple(WriteState):
            raise ValueError(f"unknown state {data['state']!r}")
        for key in ("head", "rebased_onto", "series", "base"):
            if not isinstance(data.get(key), (str, type(None))):
                raise ValueError(f"{key} is not a string")
        if data.get("head") is not None and not OBJECT_ID.fullmatch(data["head"]):
            raise ValueError(f"head {data['head'][:60]!r} is not a commit id")
        for key in ("patches", "touched"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{key} is not a list of names")
        for path in data.get("touched", []):
            check_path_is_safe(path)
        worktree = data.get("worktree", {})
        if not isinstance(worktree, dict) or not all(
            isinstance(v, str) and OBJECT_ID.fullmatch(v) for v in worktree.values()
        ):
            raise ValueError("worktree is not a map of paths to blob ids")
        for path in worktree:
            check_path_is_safe(path)
        stats, git_stats = data.get("stats", {}), data.get("git_stats", {})
        for table in (stats, git_stats):
            if not isinstance(table, dict) or not all(_is_stat(value) for value in table.values()):
                raise ValueError("stats is not a map of paths to [mode, uid, gid]")
        for path in stats:
            check_path_is_safe(path)
        if not set(git_stats) <= set(GIT_FILES):
            raise ValueError("git_stats names a file other than " + ", ".join(GIT_FILES))
        if not isinstance(data.get("three_way", False), bool):
            raise ValueError("three_way is not true or false")
        before, run = data.get("before"), data.get("run")
        return cls(
            branch=data["branch"],
            previous=data["previous"],
            head=data.get("head"),
            state=WriteState(data.get("state", WriteState.APPLIED)),
            patches=list(data.get("patches", [])),
            touched=list(data.get("touched", [])),
            rebased_onto=data.get("rebased_onto"),
            before=cls.from_json(before) if before is not None else None,
            series=data.get("series"),
            base=data.get("base"),
            three_way=data.get("three_way", False),
            run=RunMark.from_json(run) if run is not None else None,
            worktree=dict(worktree),
            stats=dict(stats),
            git_stats=dict(git_stats),
        )

    def to_json(self) -> dict:
        data = {
            "state": str(self.state),
            "branch": self.branch,
            "previous": self.previous,
            "head": self.head,
            "patches": self.patches,
            "touched": self.touched,
            "rebased_onto": self.rebased_onto,
            "before": self.before.to_json() if self.before else None,
            "series": self.series,
            "base": self.base,
            "three_way": self.three_way or None,
            "run": self.run.to_json() if self.run else None,
            "worktree": self.worktree or None,
            "stats": self.stats or None,
            "git_stats": self.git_stats or None,
        }
        return {k: v for k, v in data.items() if v is not None}


def _is_stat(value) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
        and value[0] <= 0o7777
    )


def state_path(target: Target) -> Path:
    return target.git.git_dir() / STATE_FILE


def read_record(target: Target) -> CheckoutRecord | None:
    path = state_path(target)
    if not path.is_file():
        return None
    return load_json_record(path, CheckoutRecord.from_json, "check the branch by hand, then delete it")


def write_state(target: Target, record: CheckoutRecord) -> None:
    """Write the record; one that says a write is under way names this run (a finished one names none)."""
    record = replace(record, run=RunMark.current() if record.state in INTERRUPTED else None)
    text = json.dumps(record.to_json(), indent=2) + "\n"
    write_durably(state_path(target), text.encode())
    give_to_folder_owner(state_path(target))


def replace_state(target: Target, record: CheckoutRecord) -> None:
    """write_state, all or nothing: when it fails, the state file holds what it held before (or is absent)."""
    path = state_path(target)
    old = path.read_bytes() if path.is_file() else None
    try:
        write_state(target, record)
    except OSError:
        try:
            if old is None:
                unlink_if_there(path)
            elif path.read_bytes() != old:
                write_durably(path, old, fault_points=False)
        except OSError:
            pass  # the first failure is the one to report
        raise


def drop_record(target: Target, record: CheckoutRecord) -> None:
    """Take `record` out: the one it replaced (the series below it in a stack, or before a rebase) comes back,
    or, with none, the state file goes."""
    if record.before is not None:
        write_state(target, record.before)
    else:
        unlink_if_there(state_path(target))
