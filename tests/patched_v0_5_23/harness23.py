"""Select and import the sglang 0.5.23 tree for tests/patched_v0_5_23.

This folder tests the v0.5.23 series line; it runs in its own pytest process
(one process cannot import two sglang trees). The import machinery and the
torchvision stand-in are tests/patched/cpu_sglang.py's, reused as they are:
this module only chooses the tree and hands it to that harness.

``SGLANG_TREE_ENV`` (``SGLPATCH_SGLANG_TREE_V0_5_23``) names a folder holding
``sglang/`` (an sglang checkout's ``python/``); the default is
``<repo>/build/sglang-v0.5.23/python``. A missing tree, or a tree that is not
sglang 0.5.23, or sglang already imported from another tree in the same
process, makes every test module fail with the reason (never a skip, never a
collection error that would stop a session collecting other folders too).

Import-time needs beyond ci/requirements-sglang-cpu.txt's 0.5.14 set:
``apache-tvm-ffi`` (0.5.23's custom all-reduce imports ``tvm_ffi`` at module
level; the package runs on CPU, so it is installed, not faked).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SGLANG_TREE_ENV = "SGLPATCH_SGLANG_TREE_V0_5_23"
EXPECTED_VERSION = "0.5.23"

_REPO_ROOT = Path(__file__).resolve().parents[2]
_DEFAULT_TREE = _REPO_ROOT / "build" / "sglang-v0.5.23" / "python"
_V0_5_14_HARNESS = _REPO_ROOT / "tests" / "patched"

if str(_V0_5_14_HARNESS) not in sys.path:
    sys.path.insert(0, str(_V0_5_14_HARNESS))

import cpu_sglang  # noqa: E402  (tests/patched's harness, reused)


def sglang_tree() -> Path:
    raw = os.environ.get(SGLANG_TREE_ENV)
    tree = Path(raw).expanduser().resolve() if raw else _DEFAULT_TREE
    where = f"{SGLANG_TREE_ENV}={raw}" if raw else f"default {tree}"
    version_file = tree / "sglang" / "_version.py"
    if not version_file.is_file():
        raise RuntimeError(
            f"no sglang source tree at {tree} ({where}): build and patch the "
            f"v0.5.23 line first, or point {SGLANG_TREE_ENV} at a folder that "
            "contains sglang/"
        )
    text = version_file.read_text()
    if f"'{EXPECTED_VERSION}'" not in text and f'"{EXPECTED_VERSION}"' not in text:
        raise RuntimeError(f"{tree} is not sglang {EXPECTED_VERSION} ({where})")
    return tree


_setup_error: str | None = None


def install() -> Path:
    """Install the 0.5.23 tree through tests/patched's harness.

    Refuses (RuntimeError) when sglang from another tree is already imported
    in this process: this folder runs in its own pytest process.
    """
    global _setup_error
    tree = sglang_tree()
    loaded = sys.modules.get("sglang")
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if tree not in origin.parents:
            raise RuntimeError(
                f"sglang is already imported from {origin} in this pytest process; "
                "tests/patched_v0_5_23 runs in its own process: "
                "`python -m pytest tests/patched_v0_5_23`"
            )
    # cpu_sglang picks its tree through sglang_tree(), and every import_sglang()
    # re-checks it: this process serves 0.5.23 only, so point it there for good.
    cpu_sglang.sglang_tree = lambda: tree
    return cpu_sglang.install()


def record_setup_error(message: str) -> None:
    global _setup_error
    _setup_error = message


def require() -> None:
    """Raise the setup error (if any) before a test module touches sglang."""
    if _setup_error is not None:
        raise RuntimeError(_setup_error)
