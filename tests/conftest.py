"""For every suite: the longest test files start first.

`make test` runs the suite on two workers with pytest-xdist's `--dist loadfile`, which hands out whole
files in collection order (a file's module-wide trees are built once, in one worker). A long file
collected last ran alone at the end while the other worker waited: these go first, and the rest keep
their order after them. The list is what `make test PYTEST_ARGS=--durations=0` measured (Dec 2026), the
files of 25 s or more, longest first; a file left off it only starts later.
"""

from __future__ import annotations

LONGEST_FIRST = (
    "tests/toolkit/test_rebase.py",
    "tests/bench/test_engine_bench.py",
    "tests/toolkit/test_rebase_user_work.py",
    "tests/reliability/test_hostile_checkouts.py",
    "tests/toolkit/test_check_patches.py",
    "tests/toolkit/test_lines.py",
    "tests/reliability/test_hostile_state.py",
    "tests/toolkit/test_default_base.py",
    "tests/reliability/test_interrupt.py",
    "tests/toolkit/test_pr_upstream.py",
)


def pytest_collection_modifyitems(items):
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # a stable sort
