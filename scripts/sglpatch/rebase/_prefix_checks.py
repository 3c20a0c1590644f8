"""Checks of each replayed prefix while carrying the series: its touched files must
byte-compile, and (with --check-imports) its touched modules must import on CPU.

The import check runs in a child process with the tree first on the path and
sglpatch's torchvision stand-in (cpu_standins.py) installed; it needs sglang's
import-time dependencies, which `make test` installs (ci/requirements-sglang-cpu.txt).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglpatch.series import PACKAGE_PREFIX

_IMPORT_SCRIPT = """
import importlib, sys
from sglpatch.rebase.cpu_standins import install_torchvision_standin
install_torchvision_standin()
sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
    importlib.import_module(name)
"""


def compile_error(root: Path, paths: list[str]) -> str | None:
    """'path:line: message' for the first file that does not compile, else None."""
    for path in paths:
        try:
            compile((root / path).read_bytes(), path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"{path}:{exc.lineno} does not compile ({exc.msg})"
    return None


def module_name(path: str) -> str | None:
    if not (path.startswith(PACKAGE_PREFIX) and path.endswith(".py")):
        return None
    dotted = path[len("python/") : -len(".py")].replace("/", ".")
    return dotted.removesuffix(".__init__")


def import_error(root: Path, paths: list[str], timeout: float = 300) -> str | None:
    """The last line of the error when a touched module fails to import on CPU, else None."""
    modules = [m for m in map(module_name, paths) if m]
    if not modules:
        return None
    env = {**os.environ, "SGLANG_OPT_USE_TOPK_V2": "0"}
    try:
        result = subprocess.run(
            [sys.executable, "-c", _IMPORT_SCRIPT, str(root / "python"), *modules],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"importing {', '.join(modules)} did not finish in {timeout:.0f} s"
    if result.returncode == 0:
        return None
    last = (result.stderr.strip().splitlines() or ["import failed"])[-1]
    return f"importing {', '.join(modules)} failed: {last}"
