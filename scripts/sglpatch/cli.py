"""The `sglpatch` command: a thin dispatcher over one module per command."""

from __future__ import annotations

import argparse
import signal
import sys

from sglpatch import __version__, _interrupted_while_starting, hints
from sglpatch.commands import (
    apply,
    check_patches,
    drift,
    export,
    gpu_leg,
    leg_verdict,
    lines,
    pr,
    rebase,
    recover,
    rerun,
    revert,
    status,
)
from sglpatch.errors import FatalError, os_reason
from sglpatch.git import new_run, require_git, set_verbose
from sglpatch.output import one_line, reader_gone

COMMANDS = {
    "apply": (apply, "apply the series to sglang (default: the pinned base in build/sglang)"),
    "revert": (revert, "take an applied series back out"),
    "recover": (recover, "finish or undo an interrupted apply, revert or rebase; say which state the target is in"),
    "lines": (lines, "list the series lines (patches/<tag>/): base, CPU tests, patches upstream"),
    "status": (status, "per patch: applied, applies cleanly or conflicts; and the pin"),
    "check-patches": (check_patches, "each patch's own tests fail without it and pass with it, on real trees"),
    "rebase": (rebase, "carry the series onto a newer sglang (3-way, rename detection, --continue/--abort)"),
    "drift": (drift, "patch x release table: clean / 3-way / conflict / already upstream"),
    "pr": (pr, "build upstream PR branches and bodies per PR group; dry run unless --submit"),
    "export": (export, "write patches/ from commits in a git repo"),
    "rerun": (rerun, "per PR group: the /rerun-test comment lines for the upstream tests its files affect"),
    "gpu-leg": (
        gpu_leg,
        "one GPU CI leg: apply, run upstream's test_dsa.py, the DSA kit, tests/gpu; junit + JSON summary",
    ),
    "leg-verdict": (leg_verdict, "pass or fail a GPU CI leg's JSON summary against ci/leg-expectations.json"),
}
# the commands that write to a target: only after one of them can `recover` have anything to say
WRITE_TARGETS = ("apply", "revert", "recover", "rebase", "gpu-leg")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglpatch", description="Carry a patch series on top of a pinned sglang.")
    parser.add_argument("--version", action="version", version=f"sglpatch {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every git command line run, and its exit status"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the command's own handling from here on
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a path that is not text (any byte, a C locale) prints as escapes
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command line, for a command that records how it was started
    args.run_command = main  # for a command that runs another one in this process (gpu-leg runs apply)
    module = COMMANDS[args.command][0]
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
