"""Progress and result lines. Progress goes to stderr so stdout stays parseable."""

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path


def say(message: str) -> None:
    print(one_line(message), flush=True)


def one_line(message: str) -> str:
    """The message on one line: a line break inside it, which only a path can bring, written as an escape."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(label: str):
    start = time.monotonic()
    yield
    progress(f"{label} ({time.monotonic() - start:.1f} s)")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def show_path(path: Path | str) -> str:
    """A path for messages: the home folder written as ~, so logs carry no home path."""
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home) :] if home not in ("", "/") and text.startswith(home) else text
