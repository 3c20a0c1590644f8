"""The hostile trial of round 6, on real v0.5.14 checkouts: what a user's git settings (eol conversion, a file
system monitor, clean and smudge filters, per-branch config) do to apply, its roll-back and revert.
"""

from __future__ import annotations

from sglpatch.git import Git
from testing.tree_bytes import tree_state


def test_core_safecrlf_does_not_stop_the_revert_half_way(sglpatch, checkout, patches):
    """`core.autocrlf=true` and `core.safecrlf=true` set since the clone (its files LF). Before: revert gave the
    files their LF bytes back, then failed in `git update-index` ("LF would be replaced by CRLF"), which only
    refreshes their index entries: "the revert stopped part-way", and recover failed the same way for ever."""
    git = Git(checkout)
    git.run("config", "core.autocrlf", "true")
    git.run("config", "core.safecrlf", "true")
    before = tree_state(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert tree_state(checkout) == before
    assert git.run("status", "--porcelain") == ""
