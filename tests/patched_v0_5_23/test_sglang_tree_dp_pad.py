"""Patch 0002's own test, from where the patch puts it in sglang's tree, run on the patched tree's modules.

The file is the one an upstream PR carries (`test/registered/unit/model_executor/`, `register_cpu_ci`); this
module loads it from the tree this folder tests, so `make check-patches` runs it without the patch (the file is
not there: this module fails) and with it.
"""

from __future__ import annotations

import importlib.util

import harness23

TREE_TEST = "test/registered/unit/model_executor/test_draft_dp_pad_dsa_topk_indices.py"


def _tree_test_module():
    harness23.require()
    path = harness23.sglang_tree().parent / TREE_TEST
    if not path.is_file():
        raise ImportError(f"{path}: patch 0002's test in sglang's tree is missing (is the series applied?)")
    spec = importlib.util.spec_from_file_location("sglang_tree_test_draft_dp_pad", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TestDraftDpPadDsaTopkIndices = _tree_test_module().TestDraftDpPadDsaTopkIndices
