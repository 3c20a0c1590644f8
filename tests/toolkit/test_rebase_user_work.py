"""A rebase never loses the user's work (issue 48): files in the series folder it did not write, commits on top
of the series, hooks of the user's; and what it says about a stopped or finished rebase is true.

Real trees: the release chain v0.5.14 -> 0.5.17 from PyPI wheels (`testing/sglang_trees.py`).
"""

from __future__ import annotations

import pytest

from sglpatch.series import load_series
from testing.tree_bytes import tree_state

pytestmark = pytest.mark.network  # releases 0.5.15 to 0.5.17 from PyPI, unless cached

MY_WIP = "my work in progress: not in the series\n"


def rebase(sglpatch, chain, patches, tmp_path, *args):
    return sglpatch("rebase", "--sglang", chain, "--patches", patches, "--report-dir", tmp_path / "report", *args)


# -- B: a patch file the series does not list ------------------------------------------------


def test_a_patch_the_series_does_not_list_survives_the_rebase_of_its_folder(sglpatch, chain, patches, tmp_path):
    mine = patches / "0007-my-wip.patch"
    mine.write_text(MY_WIP)
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    assert mine.read_text() == MY_WIP
    assert [p.name for p in load_series(patches).patches] == sorted(p.name for p in patches.glob("000[12]-*.patch"))


def test_a_patch_of_the_users_where_the_rebased_series_writes_one_stops_the_rebase(sglpatch, chain, patches, tmp_path):
    """Dropping patch 1 renumbers patch 2 as 0001-...: a file of that name the series did not list is the user's."""
    second = sorted(patches.glob("0002-*.patch"))[0].name
    mine = patches / ("0001-" + second.removeprefix("0002-"))
    mine.write_text(MY_WIP)
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    before = tree_state(patches)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16", "--drop", "1")
    assert code == 1 and str(mine) in err and "move that file away" in err, err
    assert tree_state(patches) == before
    mine.rename(tmp_path / mine.name)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--continue")
    assert code == 0, err
    assert (tmp_path / mine.name).read_text() == MY_WIP
    assert [p.name for p in load_series(patches).patches] == [mine.name]
    assert not (patches / second).exists()  # the old series' own patch, which the rebase replaced
