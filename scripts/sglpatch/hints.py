"""What to run next, written as the user types it: the one place core modules take a command's wording from.

A user runs `make <target> VAR=...` (what the README teaches) or `sglpatch <command> --flag` (without the
Makefile). The Makefile runs every sglpatch with SGLPATCH_FROM_MAKE=1, so a hint says `make rebase
CONTINUE=1` or `THREEWAY=1` to a make user and `sglpatch rebase --continue` or `--3way` to the others.
Only the sglpatch that make starts gets the variable, not what make test runs beside it (pytest).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from sglpatch import project

FROM_MAKE = "SGLPATCH_FROM_MAKE"


def typed_make() -> bool:
    """Whether this run was started by the Makefile (the user typed `make ...`)."""
    return os.environ.get(FROM_MAKE) == "1"


def option(flag: str, make_variable: str) -> str:
    """An option as the user gives it: `flag` (`--3way`) on the command line, `make_variable` (`THREEWAY=1`)
    to make."""
    return make_variable if typed_make() else flag


def _command(make: str, cli: str) -> str:
    return f"`{make if typed_make() else cli}`"


def _on(make: str, cli: str, root: Path | str) -> str:
    """`make ... SGLANG=ROOT` / `sglpatch ... --sglang ROOT`, ROOT quoted: a folder named `my checkout` or
    `x;touch y` is one argument, and only text."""
    where = shlex.quote(str(root))
    return _command(f"{make} SGLANG={where}", f"{cli} --sglang {where}")


def apply() -> str:
    return _command("make apply", "sglpatch apply")


def apply_to(root: Path | str) -> str:
    return _on("make apply", "sglpatch apply", root)


def continue_rebase(root: Path | str) -> str:
    """`make rebase CONTINUE=1 SGLANG=ROOT`: the rebase's target named, so the line pasted acts on it."""
    return _rebase("CONTINUE=1", "--continue", root)


def abort_rebase(root: Path | str) -> str:
    return _rebase("ABORT=1", "--abort", root)


def drop_rebase(number: int, root: Path | str) -> str:
    return _rebase(f"DROP={number}", f"--drop {number}", root)


def rebase_line(line: str, onto: str) -> str:
    """Carry the series line `line` onto release `onto` on the line's own base (it writes the new line)."""
    return _command(f"make rebase LINE={line} ONTO={onto}", f"sglpatch rebase --line {line} --onto {onto}")


def _rebase(variable: str, flag: str, root: Path | str) -> str:
    return _on(f"make rebase {variable}", f"sglpatch rebase {flag}", root)


def recover(root: Path | str | None = None) -> str:
    """`make recover SGLANG=ROOT` / `sglpatch recover --sglang ROOT` (without ROOT: the default base's)."""
    if root is None:
        return _command("make recover", "sglpatch recover")
    return _on("make recover", "sglpatch recover", root)


def revert(root: Path | str) -> str:
    return _on("make revert", "sglpatch revert", root)


def clean() -> str:
    return _command("make clean", "sglpatch clean")


def _free_place(first: Path, advised: set[Path] | None = None) -> Path:
    """`first`, else `first`-2, -3, ...: the first name nothing stands at (a dangling link counts) and no advice of
    the same message names (`advised`, to which it is added), so a move or copy advised never lands on anything."""
    place, number = first, 2
    while os.path.lexists(place) or place in (advised or ()):
        place, number = first.with_name(f"{first.name}-{number}"), number + 1
    if advised is not None:
        advised.add(place)
    return place


def move_aside(folder: Path, advised: set[Path] | None = None) -> str:
    """`mv -n FOLDER PLACE`: a folder under build/ holding the user's work, moved beside the project, where
    `make clean` (which deletes build/) does not reach; PLACE is a name not yet taken, nor in `advised` (the
    places a message names already, to which it is added), so nothing is written over or moved into another."""
    return f"`mv -n {shlex.quote(str(folder))} {shlex.quote(str(_aside(folder, advised)))}`"


def move_worktree_aside(folder: Path, advised: set[Path] | None = None) -> str:
    """move_aside for a linked worktree (`git worktree add`), or a repository with some: `mv` alone leaves the
    repository naming the old place (`git worktree prune`, which `git gc` runs, then deletes the worktree's HEAD and
    index), or its worktrees (git no longer works in them); `git worktree repair` run in the moved folder mends
    the links."""
    place = shlex.quote(str(_aside(folder, advised)))
    return f"`mv -n {shlex.quote(str(folder))} {place} && git -C {place} worktree repair`"


def _aside(folder: Path, advised: set[Path] | None) -> Path:
    root = project.PROJECT_ROOT
    return _free_place(root.parent / f"{root.name}-{folder.name}-mine", advised)


def keep_copies(root: Path | str, paths: list[str]) -> str:
    """`(set -C; cat F > F.mine && ...)`: a copy of each of `paths` there is (`cp -R` for a folder), beside it, at a
    name not yet taken (F.mine, else F.mine-2, ...: a F.mine of the user's stopped the copies, and with them the
    advice); `set -C`: never over a file of that name made since; "" when none is there."""
    there = [Path(root) / path for path in paths if os.path.lexists(Path(root) / path)]
    copies = [_copy(path, shlex.quote(str(_free_place(_mine(path))))) for path in there]
    return f"`(set -C; {' && '.join(copies)})`" if copies else ""


def _copy(path: Path, mine: str) -> str:
    """A file's bytes by `cat`, under `set -C`; a folder that took a file's place (one of ignored files, which `git
    checkout -- F` deletes) by `cp -R` (`cat` fails on it, leaving an empty F.mine)."""
    if path.is_dir() and not path.is_symlink():
        return f"cp -R {shlex.quote(str(path))} {mine}"
    return f"cat {shlex.quote(str(path))} > {mine}"


def put_back_keeping_copies(root: Path | str, paths: list[str]) -> str:
    """Advice that puts files back as HEAD has them, after a copy of each as FILE.mine: `git checkout -- FILES`
    alone would throw away the edits it is advised for. `--literal-pathspecs`: a name with `*`, `?` or `[` is that
    file, not a pattern that puts back other files too."""
    keep = keep_copies(root, paths)
    keep = f"{keep} keeps a copy of each as FILE.mine (or FILE.mine-N), then " if keep else ""
    where = shlex.quote(str(root))
    return (
        f"{keep}`git --literal-pathspecs -C {where} checkout -- {' '.join(shlex.quote(p) for p in paths)}` puts them "
        "back as HEAD has them"
    )


def move_beside(path: Path, advised: set[Path]) -> str:
    """`mv -n FILE FILE.mine` (or FILE.mine-N): kept where it was, at a name not yet taken nor in `advised`."""
    return f"`mv -n {shlex.quote(str(path))} {shlex.quote(str(_free_place(_mine(path), advised)))}`"


def copy_aside(folder: Path) -> str:
    """`cp -R FOLDER PLACE`: a copy beside it, PLACE a name not yet taken (cp -R into an existing folder nests)."""
    return f"`cp -R {shlex.quote(str(folder))} {shlex.quote(str(_free_place(_mine(folder))))}`"


def _mine(path: Path) -> Path:
    return path.with_name(f"{path.name}.mine")
