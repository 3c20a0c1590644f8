"""For every suite: the longest test files start first.

`make test` runs the suite on two workers with pytest-xdist's `--dist loadfile`, which hands out whole
files (a file's module-wide trees are built once, in one worker) in collection order only with
`--no-loadscope-reorder`, which the Makefile passes: by default xdist (3.x) hands them out by their number
of tests, most first, and this order went unused (4 Dec 2026: `test_rebase`, the longest, started 50 s into
the run, after five files of many short tests). A long file collected last runs alone at the end while the
other worker waits: these go first, and the rest keep their order after them. The list is the files of
10 s or more, longest first, as two runs of the main suite measured them (Dec 2026, per-file wall time on
one worker); a file left off it only starts later.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LONGEST_FIRST = (
    "tests/toolkit/test_rebase.py",
    "tests/bench/test_engine_bench.py",
    "tests/reliability/test_hostile_checkouts.py",
    "tests/toolkit/test_rebase_user_work.py",
    "tests/toolkit/test_clean_trial.py",
    "tests/toolkit/test_check_patches.py",
    "tests/reliability/test_interrupt.py",
    "tests/reliability/test_hostile_state.py",
    "tests/toolkit/test_pr_upstream.py",
    "tests/toolkit/test_default_base.py",
    "tests/patched/test_p5_dsa_draft_extend_graph.py",
    "tests/patched/test_p1_dsa_layout_metadata.py",
    "tests/toolkit/test_lines.py",
    "tests/toolkit/test_pr.py",
    "tests/patched/test_p2_dsa_indexer_paths.py",
    "tests/reliability/test_hostile_input.py",
    "tests/reliability/test_make_and_setup.py",
    "tests/reliability/test_concurrency.py",
    "tests/reliability/test_hostile_round4.py",
    "tests/reliability/test_no_leaks.py",
    "tests/reliability/test_hostile_trial.py",
    "tests/reliability/test_hostile_env.py",
    "tests/bench/test_engine_drafts.py",
    "tests/reliability/test_enospc.py",
    "tests/patched/test_p6_dsa_seed_in_draft_extend_graph.py",
    "tests/bench/test_engine_stall.py",
)


# One file per hostile trial past the first (round 4 on): each test the case a trial found, failing before its fix.
# `make test-fault` runs them with the rest of tests/reliability (CI runs it); `make test` leaves them out, which
# keeps it near 8 minutes on 2 cores (they took about 175 s of its 940 s of tests on 5 Dec 2026).
HOSTILE_ROUND = re.compile(r"tests/reliability/test_hostile_round\d+\.py$")


def pytest_collection_modifyitems(items):
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # a stable sort
    for item in items:
        if HOSTILE_ROUND.search(item.nodeid.split("::")[0]):
            item.add_marker(pytest.mark.hostile_rounds)


def pytest_sessionstart(session):
    """The mark of a test run in the folder `--basetemp` names (made now, as pytest makes it, emptied first): the
    Makefile deletes a PYTEST_TMP the user names only where it holds this mark, or nothing."""
    config = session.config
    if config.option.basetemp and not hasattr(config, "workerinput"):
        (Path(config._tmp_path_factory.getbasetemp()) / ".sglpatch-pytest").touch()
