"""Where the project keeps the series and the default base."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(os.environ.get("SGLPATCH_PROJECT", Path(__file__).resolve().parents[2]))


def default_patch_dir() -> Path:
    return PROJECT_ROOT / "patches"


def default_base_dir() -> Path:
    return PROJECT_ROOT / "build" / "sglang"
