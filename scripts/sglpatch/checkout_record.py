"""The record sglpatch keeps in a git checkout it patched: .git/sglpatch-state.json.

It names the series branch, the branch it was made from ("previous"), the head
commit and the files the series touches. Its "state" is written "applying"
before the first write to the checkout and "applied" after the last; revert
writes "reverting" first and deletes the file last. No "state" means applied.
A rebase that finishes writes one too (the rebased branch), keeping the record
it replaced under "before", so a revert goes back one step at a time.
"""

from __future__ import annotations

import json

from sglpatch.durable import write_durably
from sglpatch.errors import FatalError
from sglpatch.target import Target

STATE_FILE = "sglpatch-state.json"


def read_state(target: Target) -> dict | None:
    path = target.git.git_dir() / STATE_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("branch", "previous")):
            raise ValueError("missing branch or previous")
        return record
    except (ValueError, UnicodeDecodeError) as exc:
        raise FatalError(f"{path} is corrupt ({exc}); check the branch by hand, then delete it") from None


def write_state(target: Target, record: dict) -> None:
    write_durably(target.git.git_dir() / STATE_FILE, (json.dumps(record, indent=2) + "\n").encode())
