"""The `sglpatch` command: a thin dispatcher over one module per command."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from types import ModuleType

from sglpatch import __version__, _interrupted_while_starting, hints
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import new_run, require_git, set_verbose
from sglpatch.output import one_line, reader_gone

# Each command: its module in sglpatch/commands/, and its one line of help. A run imports the module of its own
# command only (each is a few capabilities deep): a command starts in half the time it took with all of them.
COMMANDS = {
    "apply": ("apply", "apply the series to sglang (default: the pinned base in build/sglang)"),
    "revert": ("revert", "take an applied series back out"),
    "recover": ("recover", "finish or undo an interrupted apply, revert or rebase; say which state the target is in"),
    "lines": ("lines", "list the series lines (patches/<tag>/): base, CPU tests, patches upstream"),
    "status": ("status", "per patch: applied, applies cleanly or conflicts; and the pin"),
    "check-patches": ("check_patches", "each patch's own tests fail without it and pass with it, on real trees"),
    "rebase": ("rebase", "carry the series onto a newer sglang (3-way, rename detection, --continue/--abort)"),
    "drift": ("drift", "patch x release table: clean / 3-way / conflict / already upstream"),
    "pr": ("pr", "build upstream PR branches and bodies per PR group; dry run unless --submit"),
    "export": ("export", "write patches/ from commits in a git repo"),
    "clean": ("clean", "delete build/ (the default bases, reports), unless a checkout there holds work of yours"),
    "rerun": ("rerun", "per PR group: the /rerun-test comment lines for the upstream tests its files affect"),
    "gpu-leg": (
        "gpu_leg",
        "one GPU CI leg: apply, run upstream's test_dsa.py, the DSA kit, tests/gpu; junit + JSON summary",
    ),
    "leg-verdict": ("leg_verdict", "pass or fail a GPU CI leg's JSON summary against ci/leg-expectations.json"),
}
# the commands that write to a target: only after one of them can `recover` have anything to say
WRITE_TARGETS = ("apply", "revert", "recover", "rebase", "gpu-leg")


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"sglpatch.commands.{COMMANDS[name][0]}")


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `chosen` (a command's name), only that command's own options are read in."""
    parser = argparse.ArgumentParser(prog="sglpatch", description="Carry a patch series on top of a pinned sglang.")
    parser.add_argument("--version", action="version", version=f"sglpatch {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every git command line run, and its exit status"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if chosen in (None, name):
            command_module(name).add_arguments(command_parser)
    return parser


def _chosen(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the options before it take no value)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the command's own handling from here on
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a path that is not text (any byte, a C locale) prints as escapes
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser(_chosen(argv)).parse_args(argv)
    args.argv = argv  # the command line, for a command that records how it was started
    args.run_command = main  # for a command that runs another one in this process (gpu-leg runs apply)
    module = command_module(args.command)
    set_verbose(args.verbose)
    new_run()
    try:
        require_git()
        return module.run(args)
    except FatalError as exc:
        print(one_line(f"sglpatch {args.command}: error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # a line printed past say(), its reader gone: end quietly, as git and coreutils do
        reader_gone(sys.stdout)
        return 0
    except OSError as exc:  # a file the command could not read or write (permissions, a full or read-only disk)
        where = f" {exc.filename}" if exc.filename else ""
        recover = hints.recover(getattr(args, "sglang", None))
        after = f"; {recover} says where the target stands" if args.command in WRITE_TARGETS else ""
        print(
            one_line(f"sglpatch {args.command}: error: cannot access{where} ({os_reason(exc)}){after}"),
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"sglpatch {args.command}: interrupted", file=sys.stderr)
        return 130
