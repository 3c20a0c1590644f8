"""Compiled bytecode beside a module: `__pycache__/<name>.<tag>[.opt-N].pyc`.

Python checks a timestamp pyc against its source's mtime and size, and a checked-hash
pyc against its source's hash, but an unchecked-hash pyc (`compileall
--invalidation-mode unchecked-hash`, as some distributions install) is used as it is:
after its source is rewritten, Python would still run the old code. So a package
apply removes the bytecode of every module it rewrites (journaled, so revert puts it
back), and a revert removes what Python compiled from the patched source meanwhile.
"""

from __future__ import annotations

import glob
from pathlib import Path


def bytecode_of(source: Path) -> list[Path]:
    """The cached bytecode files of `source` (a .py file), of any interpreter and optimization level."""
    if source.suffix != ".py":
        return []
    cache = source.parent / "__pycache__"
    if not cache.is_dir() or cache.is_symlink():
        return []
    return sorted(p for p in cache.glob(f"{glob.escape(source.stem)}.*.pyc") if p.is_file() and not p.is_symlink())


def is_bytecode(path: str) -> bool:
    """Whether a path (relative, with /) names a file in a `__pycache__` folder."""
    parts = path.split("/")
    return len(parts) >= 2 and parts[-2] == "__pycache__" and parts[-1].endswith(".pyc")
