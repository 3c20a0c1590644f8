"""Where the project keeps its series lines and their default bases.

A series line is a folder `patches/<tag>/` holding `series` and `pin.json`, one per
supported sglang base; its name is the pinned tag (`v0.5.14`). Which line a command
uses, and the default line's folder, are decided in `lines.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglpatch.project_kind import DEFAULT_KIND

PROJECT_ROOT = Path(os.environ.get("SGLPATCH_PROJECT", Path(__file__).resolve().parents[2]))


def patches_root() -> Path:
    return PROJECT_ROOT / "patches"


def default_base_dir() -> Path:
    return PROJECT_ROOT / "build" / DEFAULT_KIND.name
