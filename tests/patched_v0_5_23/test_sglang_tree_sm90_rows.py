"""The SM90 row-width patch's CPU test in sglang's tree, run from the patched tree.

The file is the one the upstream PR carries (`test/registered/unit/layers/attention/`,
`register_cpu_ci`); this module loads it from the tree this folder tests and runs its tests here, so
`make check-patches` runs them without the patch (the file is not there: one test fails, saying so)
and with it.
"""

from __future__ import annotations

import importlib.util

import harness23

TREE_TEST = "test/registered/unit/layers/attention/test_dsa_sm90_paged_mqa_rows.py"


def _tree_test_path():
    harness23.require()
    return harness23.sglang_tree().parent / TREE_TEST


def _tree_tests() -> dict:
    path = _tree_test_path()
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("sglang_tree_test_sm90_rows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: test for name, test in vars(module).items() if name.startswith("test_")}


def test_the_patch_puts_its_test_in_sglangs_tree():
    assert _tree_test_path().is_file(), f"{_tree_test_path()}: the SM90 row-width patch's test is missing"


globals().update(_tree_tests())
