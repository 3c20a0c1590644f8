"""The layers hold: cli -> commands -> capabilities -> core (docs/architecture.md, "The layers").

- the core is the package's top level (`sglpatch/*.py`) and its core packages (safety/): it imports no
  capability and no command (cli.py, the entry, dispatches to the commands); the top level holds at most
  TOP_LEVEL_MOST modules, counting every `.py` there (the entry's `__init__.py`, `__main__.py` and cli.py too);
- a capability is a sub-package (targets/, rebase/, upstream/, gpu/): it imports the core and the capabilities
  CAPABILITIES lets it, never a command, and never another package's private module (`_name.py`);
- a command imports anything but another command (what two commands share is commands/common.py);
- targets/ has a face, the names its __init__ lists in __all__: a command imports targets/ only through it, and so
  does any other module outside targets/ (but for rebase_store, the rebase's own state, which rebase/ reads and
  writes);
- what state a target is in is read in one place, targets/target_state.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sglpatch
import sglpatch.targets

PACKAGE = Path(sglpatch.__file__).resolve().parent
SHARED_BY_COMMANDS = "sglpatch.commands.common"
ENTRY = {"cli.py", "__main__.py"}
# The top level is the entry and the core every capability shares; what belongs to one duty lives in a sub-package.
TOP_LEVEL_MOST = 16
# Sub-packages of the core: they import only the core, and every layer may import them.
CORE_PACKAGES = {"safety"}
# Each capability, and the capabilities it may import (no circle: each imports only those listed before it).
CAPABILITIES = {
    "targets": set(),
    "rebase": {"targets"},
    "upstream": {"rebase"},
    "gpu": set(),
}
# The readers of a target's records: only target_state (and the records' own package) call them.
RECORD_READERS = {"sglpatch.targets.checkout_record.read_record", "sglpatch.targets.journal.read_journal"}
# The rebase's own working state (what it replayed, where it stopped) is read by the rebase alone.
REBASE_STATE_READERS = {"rebase/rebase_engine.py", "targets/target_state.py"}
# targets/'s face (its __init__'s __all__), and the one module of it rebase/ imports besides: the rebase's own state.
TARGETS = "sglpatch.targets"
FACE = set(sglpatch.targets.__all__)
REBASE_STORE = "sglpatch.targets.rebase_store"


def _imports(path: Path) -> set[str]:
    """Every module (and `module.name`) `path` imports, relative imports made absolute."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name == "sglpatch" or name.startswith("sglpatch.")}


def _room(name: str) -> str | None:
    """The sub-package a dotted name lies in (`sglpatch.targets.journal` -> targets), None for the core."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def _rooms(imports: set[str]) -> set[str]:
    """The capabilities and the command folder among `imports` (the core, its packages too, left out)."""
    return {room for room in map(_room, imports) if room is not None and room not in CORE_PACKAGES}


def _modules(room: str | None) -> list[Path]:
    folder = PACKAGE / room if room else PACKAGE
    return sorted(folder.glob("*.py"))


def _where(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def test_every_sub_package_is_a_command_folder_or_a_capability():
    sub_packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert sub_packages == {"commands"} | set(CAPABILITIES) | CORE_PACKAGES


def test_the_top_level_holds_the_entry_and_the_shared_core_only():
    top_level = [path.name for path in _modules(None)]
    assert len(top_level) <= TOP_LEVEL_MOST, sorted(top_level)


def test_each_capability_says_what_it_owns_and_what_it_may_import():
    for room in [*CAPABILITIES, *CORE_PACKAGES]:
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
        lines = doc.split("\n\n")[0].splitlines()  # its first paragraph; what follows is free
        assert len(lines) == 2 and lines[1].startswith("May import:"), f"{room}/__init__.py: {doc!r}"


def test_no_command_imports_another_command():
    commands = _modules("commands")
    assert len(commands) >= 10
    crossing = {_where(path): {n for n in _imports(path) if n.startswith("sglpatch.commands.")} for path in commands}
    crossing = {where: {n for n in found if not n.startswith(SHARED_BY_COMMANDS)} for where, found in crossing.items()}
    assert {where: found for where, found in crossing.items() if found} == {}


def test_the_core_imports_no_capability_and_no_command():
    core = [path for path in _modules(None) if path.name not in ENTRY]
    core += [path for package in sorted(CORE_PACKAGES) for path in _modules(package)]
    assert len(core) >= 15
    upward = {_where(path): _rooms(_imports(path)) for path in core}
    assert {where: found for where, found in upward.items() if found} == {}


def test_a_capability_imports_the_core_and_the_capabilities_below_it():
    for room, below in CAPABILITIES.items():
        modules = _modules(room)
        assert modules, room
        outside = {_where(path): _rooms(_imports(path)) - {room} - below for path in modules}
        assert {where: found for where, found in outside.items() if found} == {}, f"{room} may import only {below}"


def test_the_capabilities_form_no_circle():
    order = list(CAPABILITIES)
    for room, below in CAPABILITIES.items():
        assert all(order.index(other) < order.index(room) for other in below), room


def test_private_modules_stay_in_their_package():
    private = {}
    for path in PACKAGE.rglob("*.py"):
        room = path.parent.name if path.parent != PACKAGE else None
        for name in _imports(path):
            parts = name.split(".")
            if len(parts) > 2 and _room(name) not in (None, room) and parts[2].startswith("_"):
                private.setdefault(_where(path), set()).add(name)
    assert private == {}


def _names_from_targets(path: Path) -> set[str]:
    """What `path` takes from targets/: `sglpatch.targets:NAME` for a name of the package itself, else the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == TARGETS:
            found |= {f"{TARGETS}:{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(TARGETS + "."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(TARGETS + ".")}
    return found


def test_targets_is_reached_through_its_face():
    assert all(hasattr(sglpatch.targets, name) for name in FACE)
    face = {f"{TARGETS}:{name}" for name in FACE}
    rebase_state = {REBASE_STORE, f"{TARGETS}:rebase_store"}
    taken, behind = {}, {}
    for path in PACKAGE.rglob("*.py"):
        where = _where(path)
        if not where.startswith("targets/"):
            taken[where] = _names_from_targets(path)
            allowed = face | (rebase_state if where.startswith("rebase/") else set())
            behind[where] = taken[where] - allowed
    assert {"commands/apply.py", "commands/recover.py", "rebase/rebase_engine.py"} <= {w for w, f in taken.items() if f}
    assert {where: found for where, found in behind.items() if found} == {}


def test_what_state_a_target_is_in_is_read_in_one_place():
    readers = {}
    for path in PACKAGE.rglob("*.py"):
        where, imports = _where(path), _imports(path)
        if not where.startswith("targets/") and imports & RECORD_READERS:
            readers[where] = imports & RECORD_READERS
        if where not in REBASE_STATE_READERS and _reads_rebase_state(path):
            readers[where] = {"rebase_store.load"}
    assert readers == {}


def _reads_rebase_state(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    called = {
        f"{node.func.value.id}.{node.func.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
    }
    return "rebase_store.load" in called or "sglpatch.targets.rebase_store.load" in _imports(path)
