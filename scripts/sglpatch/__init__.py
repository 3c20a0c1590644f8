"""sglpatch: carry an ordered patch series on top of a pinned sglang release."""

import os
import signal
import sys

__version__ = "0.1.0"


def _interrupted_while_starting(signum, frame):
    name = signal.Signals(signum).name
    print(f"sglpatch: interrupted by {name} while starting; nothing was changed", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


# Started as the command (the `sglpatch` script, `python -m sglpatch`): a Ctrl-C while Python imports the
# toolkit (a tenth of a second) ends it in one line, not a traceback; `cli.main` puts Python's handler back.
# A SIGINT ignored when it started (a background job) stays ignored.
_as_command = os.path.basename(sys.argv[0]) == "sglpatch" or sys.argv[0] == "-m"
if _as_command and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
