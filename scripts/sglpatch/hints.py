"""What to run next, written as a user types it: the one place core modules take Makefile wording from.

Each hint names the make target (what the README teaches) and, where a target folder is involved,
the plain `sglpatch` command too, so a user without the Makefile can act on it.
"""

from __future__ import annotations

from pathlib import Path

CONTINUE_REBASE = "`make rebase CONTINUE=1`"
ABORT_REBASE = "`make rebase ABORT=1`"
APPLY = "`make apply`"
RECOVER = "`make recover`"


def drop_rebase(number: int) -> str:
    return f"`make rebase DROP={number}`"


def recover(root: Path | str) -> str:
    return f"`sglpatch recover --sglang {root}` (make recover SGLANG={root})"


def recover_short(root: Path | str) -> str:
    return f"`make recover SGLANG={root}`"


def revert(root: Path | str) -> str:
    return f"`make revert SGLANG={root}`"
