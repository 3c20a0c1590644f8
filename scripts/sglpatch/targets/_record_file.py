"""Reading a record sglpatch keeps in a target (the checkout record, the package journal, the rebase state)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sglpatch.errors import CorruptState

Record = TypeVar("Record")


def load_json_record(path: Path, from_json: Callable[[object], Record], advice: str) -> Record:
    """What `from_json` makes of the JSON in `path`; a file it cannot read is CorruptState: one line, with
    `advice` saying what to do (a target whose record is damaged is never guessed at)."""
    try:
        return from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptState(f"{path} is corrupt ({exc}); {advice}") from None
