"""Progress and result lines. Progress goes to stderr so stdout stays parseable."""

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path


def say(message: str) -> None:
    _write(sys.stdout, one_line(message))


def one_line(message: str) -> str:
    """The message on one line: a line break inside it, which only a path can bring, written as an escape."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def progress(message: str) -> None:
    _write(sys.stderr, f"... {message}")


def _write(stream, line: str) -> None:
    """One line to `stream`. When its reader has gone (`sglpatch lines | head -1`), the rest is dropped and the
    command carries on, quietly: a run that writes to a target is never cut short by a closed pipe."""
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        reader_gone(stream)


def reader_gone(stream) -> None:
    """Point `stream` at /dev/null, so what is still buffered, later lines and the flush at exit go nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stream without a file descriptor (captured by a test): nothing to redirect
        pass


@contextmanager
def timed(label: str):
    start = time.monotonic()
    yield
    progress(f"{label} ({time.monotonic() - start:.1f} s)")


def plural(count: int, noun: str) -> str:
    """`1 patch`, `6 patches`, `2 files`."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x', 'z')) else 's'}"


def show_path(path: Path | str) -> str:
    """A path for messages: the home folder written as ~, so logs carry no home path."""
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home) :] if home not in ("", "/") and text.startswith(home) else text
