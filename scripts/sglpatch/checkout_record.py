"""The record sglpatch keeps in a git checkout it patched: .git/sglpatch-state.json, as a `CheckoutRecord`.

It names the series branch, the branch it was made from ("previous"), the head
commit and the files the series touches. Its "state" is written "applying"
before the first write to the checkout and "applied" after the last; revert
writes "reverting" first and deletes the file last. No "state" means applied.
A rebase that finishes writes one too (the rebased branch), keeping the record
it replaced under "before", so a revert goes back one step at a time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from sglpatch.durable import write_durably
from sglpatch.errors import FatalError
from sglpatch.series import check_path_is_safe
from sglpatch.target import Target
from sglpatch.write_states import WriteState

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
    before: CheckoutRecord | None = None  # set by a rebase: the record it replaced

    def with_state(self, state: WriteState) -> CheckoutRecord:
        return replace(self, state=state)

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
        for key in ("head", "rebased_onto"):
            if not isinstance(data.get(key, ""), str):
                raise ValueError(f"{key} is not a string")
        if data.get("head") is not None and not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", data["head"]):
            raise ValueError(f"head {data['head'][:60]!r} is not a commit id")
        for key in ("patches", "touched"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{key} is not a list of names")
        for path in data.get("touched", []):
            check_path_is_safe(path)
        before = data.get("before")
        return cls(
            branch=data["branch"],
            previous=data["previous"],
            head=data.get("head"),
            state=WriteState(data.get("state", WriteState.APPLIED)),
            patches=list(data.get("patches", [])),
            touched=list(data.get("touched", [])),
            rebased_onto=data.get("rebased_onto"),
            before=cls.from_json(before) if before is not None else None,
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
        }
        return {k: v for k, v in data.items() if v is not None}


def read_state(target: Target) -> CheckoutRecord | None:
    path = target.git.git_dir() / STATE_FILE
    if not path.is_file():
        return None
    try:
        return CheckoutRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FatalError(f"{path} is corrupt ({exc}); check the branch by hand, then delete it") from None


def write_state(target: Target, record: CheckoutRecord) -> None:
    text = json.dumps(record.to_json(), indent=2) + "\n"
    write_durably(target.git.git_dir() / STATE_FILE, text.encode())
