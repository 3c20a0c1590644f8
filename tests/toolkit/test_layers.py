"""The layers hold: cli -> commands -> core, no command imports another, and no core module imports a command."""

from __future__ import annotations

import ast
from pathlib import Path

import sglpatch

PACKAGE = Path(sglpatch.__file__).resolve().parent
SHARED_BY_COMMANDS = "sglpatch.commands.common"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _command_modules(imports: set[str]) -> set[str]:
    return {n for n in imports if n.startswith("sglpatch.commands.") and not n.startswith(SHARED_BY_COMMANDS)}


def test_no_command_imports_another_command():
    commands = sorted((PACKAGE / "commands").glob("*.py"))
    assert len(commands) >= 10
    crossing = {path.name: _command_modules(_imports(path)) for path in commands}
    assert {name: found for name, found in crossing.items() if found} == {}


def test_no_core_module_imports_a_command():
    core = [path for path in PACKAGE.glob("*.py") if path.name != "cli.py"]
    assert len(core) >= 15
    upward = {path.name: _command_modules(_imports(path)) | ({"sglpatch.commands"} & _imports(path)) for path in core}
    assert {name: found for name, found in upward.items() if found} == {}
