"""The hostile trial of round 16: what round 15 left untried (a `rebase --drop` cut inside its git, then `--abort`
or `--continue`; the user's `core.hooksPath`; `i18n.commitEncoding` / `i18n.logOutputEncoding` with names and
subjects past ASCII) and an `--abort` of a rebase killed mid-way (docs/reliability.md, round 16).
"""

from __future__ import annotations

import shutil
import subprocess

from testing import git_cut
from testing.killed_cli import cli_child, point_after
from testing.sglang_trees import stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import tree_state

# -- a --drop cut inside its git, then --abort or --continue (testing/git_cut.py) -------------------------------


def _cut_drops(sglpatch, checkout, patches, tmp_path) -> tuple[git_cut.EachPoint, list[str], dict[str, str]]:
    """A rebase stopped at a conflict; its `--drop 1` cut at each point, and the checkout as an uncut `--abort`
    from the stop leaves it."""
    stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    cuts = git_cut.EachPoint(["rebase", "--sglang", checkout, "--drop", "1"], checkout, tmp_path)
    points = cuts.whole()
    shutil.rmtree(checkout)
    subprocess.run(["cp", "-a", str(cuts.saved), str(checkout)], check=True)
    assert git_cut.run_cli(["rebase", "--sglang", checkout, "--abort"], {}).returncode == 0
    return cuts, points, tree_state(checkout)


def test_a_drop_killed_inside_its_git_then_abort_ends_as_an_abort_from_the_stop(sglpatch, checkout, patches, tmp_path):
    """`rebase --drop 1` of the patch a stopped rebase waits at, killed inside its git at each of its 8 points, then
    `--abort` (the way back the stop named) instead of `--drop 1` again. Before: at 5 points the abort failed in a
    git (``update-ref -d ORIG_HEAD``, ``checkout -q -f`` ... failed), the locks the cut left (CHERRY_PICK_HEAD.lock,
    index.lock, HEAD.lock, ORIG_HEAD.lock) stayed, and at one of them recover then refused the index.lock as no
    run's of its own (delete it by hand); at another it said "rebase aborted" with ORIG_HEAD.lock left. Now an
    --abort removes the locks a cut --drop left, keeps the ORIG_HEAD it recorded, and ends byte for byte as an
    --abort from the stop; past the drop's record (the rebase replaying again) it names recover, which settles it."""
    cuts, points, aborted = _cut_drops(sglpatch, checkout, patches, tmp_path)
    left = []
    for point in range(1, len(points) + 1):
        cuts.cut_at(point)
        again = git_cut.run_cli(["rebase", "--sglang", checkout, "--abort"], {})
        if again.returncode == 0 and tree_state(checkout) == aborted:
            continue
        if again.returncode == 2 and "recover" in again.stderr and again.stderr.count("\n") == 1:
            if git_cut.run_cli(["recover", "--sglang", checkout], {}).returncode == 0:
                continue
        left.append((points[point - 1], again.returncode, again.stderr))
    assert not left, left
    assert not list((checkout / ".git").rglob("*.lock"))


def test_a_drop_killed_inside_its_git_then_continue_names_the_way_out(sglpatch, checkout, patches, tmp_path):
    """The same cut --drop, then `--continue`. Before: it went on as if no --drop had begun: "still unresolved:
    ...dsa_backend.py" (the --drop had quit the pick), or "the cherry-pick ... is gone ...; run --abort and start
    again", an --abort that then failed on the cut's locks. Now, before the drop's record, it refuses in one line,
    nothing changed, naming `--drop 1` again and `--abort`; and `--drop 1` then goes through."""
    cuts, points, _ = _cut_drops(sglpatch, checkout, patches, tmp_path)
    named = 0
    for point in range(1, len(points) + 1):
        cuts.cut_at(point)
        if git_cut.run_cli(["recover", "--sglang", checkout], {}).returncode == 0:
            continue  # past the drop's record: recover settled it (round 15)
        cut_short = tree_state(checkout)
        again = git_cut.run_cli(["rebase", "--sglang", checkout, "--continue"], {})
        assert again.returncode == 2 and again.stderr.count("\n") == 1, (points[point - 1], again.stderr)
        assert "--drop 1" in again.stderr and "--abort" in again.stderr, (points[point - 1], again.stderr)
        assert tree_state(checkout) == cut_short
        assert git_cut.run_cli(["rebase", "--sglang", checkout, "--drop", "1"], {}).returncode == 0
        named += 1
    assert named >= 4, named


# -- an --abort of a rebase killed mid-way ---------------------------------------------------------------------------


def test_abort_of_a_rebase_killed_mid_way_keeps_an_edit_made_since(sglpatch, checkout, patches, tmp_path):
    """`rebase --onto` killed (`kill -9`, a closed terminal) while it replays, the user edits a file of theirs in
    the checkout, then runs `rebase --abort` (not recover). Before: "rebase aborted: back on sglpatch/v0.5.14",
    exit 0, and the edit was gone (its `git checkout -f`), where recover refuses changes the killed run does not
    explain. Now --abort of a rebase killed mid-way (none stopped for the user) refuses in one line, nothing
    changed, naming recover, which refuses the edit as before."""
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    rebase = ("rebase", "--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report")
    rebase += ("--onto", "quiet", "--release", "0.5.14")
    subprocess.run(["cp", "-a", str(checkout), str(tmp_path / "saved")], check=True)
    subprocess.run(["cp", "-a", str(patches), str(tmp_path / "saved-patches")], check=True)
    trace = tmp_path / "trace"
    assert cli_child(*rebase, SGLPATCH_FAULT_TRACE=trace).returncode == 0
    for path, saved in ((checkout, "saved"), (patches, "saved-patches")):
        shutil.rmtree(path)
        subprocess.run(["cp", "-a", str(tmp_path / saved), str(path)], check=True)
    at = point_after(trace, "rebase: 0001-DSA-Mark-the-indexer-metadata-for-the-test-series.patch picked")
    assert cli_child(*rebase, SGLPATCH_FAULT_AT=at, SGLPATCH_FAULT_SIGNAL="KILL").returncode == -9
    mine = checkout / "python" / "sglang" / "version.py"
    mine.write_text(mine.read_text() + "# my edit\n")
    edited = tree_state(checkout)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 2 and err.count("\n") == 1 and "recover" in err, (out, err)
    assert tree_state(checkout) == edited
    code, out, err = sglpatch("recover", "--sglang", checkout)
    assert code == 2 and "version.py" in err, (out, err)
    assert mine.read_text().endswith("# my edit\n")
