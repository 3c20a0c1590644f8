"""Progress and result lines. Progress goes to stderr so stdout stays parseable."""

import sys
import time
from contextlib import contextmanager


def say(message: str) -> None:
    print(message, flush=True)


def progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(label: str):
    start = time.monotonic()
    yield
    progress(f"{label} ({time.monotonic() - start:.1f} s)")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
