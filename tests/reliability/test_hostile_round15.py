"""The hostile trial of round 15: what round 14 left untried (`pr` under the user's git settings, kills inside git
of `rebase --continue` and `--drop`, the user's `GIT_TEMPLATE_DIR` / `init.templateDir`, special files at a
series path, two `clean` runs at once) (docs/reliability.md, round 15).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sglpatch.git import Git
from testing import git_cut, sglang_trees
from testing.sglang_trees import stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import tree_state


def _template_with_a_refusing_hook(tmp_path):
    """A git template whose reference-transaction hook refuses every ref update (as one guarding the user's
    branches from a stray update does, once its own check says no)."""
    hooks = tmp_path / "template" / "hooks"
    hooks.mkdir(parents=True)
    hook = hooks / "reference-transaction"
    hook.write_text("#!/bin/sh\necho 'refused by my hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    return hooks.parent


@pytest.mark.parametrize("how", ["GIT_TEMPLATE_DIR", "init.templateDir"])
def test_apply_status_rebase_and_revert_go_through_whatever_hooks_the_users_git_template_holds(
    sglpatch, checkout, patches, tmp_path, monkeypatch, how
):
    """A git template of the user's (`GIT_TEMPLATE_DIR`, or `init.templateDir` in ~/.gitconfig: how tools such as
    pre-commit's `init-templatedir` put hooks in every new repository) holding a reference-transaction hook that
    refuses: the toolkit's own scratch repositories were made from it, and apply and rebase failed in one line,
    "`git -C /tmp/sglpatch-ws-... update-ref refs/heads/copied ...` failed (128)", which named no cause (nothing
    changed). Now the toolkit's repositories are made from no template: apply, status, rebase and revert go
    through (apply, status and revert leave the checkout as it was)."""
    template = _template_with_a_refusing_hook(tmp_path)
    if how == "GIT_TEMPLATE_DIR":
        monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    else:
        config = tmp_path / "user-gitconfig"
        config.write_text(f"[user]\n\tuseConfigOnly = true\n[init]\n\ttemplateDir = {template}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    upstream_branches(checkout, quiet=True)
    sglang_trees.apply_status_revert(sglpatch, checkout, patches)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--report-dir", tmp_path / "report", "--onto", "quiet", "--release", "0.5.14")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--patches", patches, *args)
    assert code == 0 and "rebased onto quiet" in out, (out, err)


# -- kills inside git of `rebase --drop` (testing/git_cut.py) ----------------------------------------------


def _as_dropped(checkout) -> dict[str, str]:
    """The checkout byte for byte (ORIG_HEAD, the index and the work tree included), but for what a run made at
    another second differs in: the rebase's settled state file and its branch, whose commits' dates differ
    (their trees, which HEAD's stands for, and the branch HEAD names do not)."""
    state = {k: v for k, v in tree_state(checkout).items() if "sglpatch-state" not in k and "/sglpatch/onto-" not in k}
    git = Git(checkout)
    return {**state, "HEAD": git.run("symbolic-ref", "HEAD"), "tree": git.run("rev-parse", "HEAD^{tree}")}


def test_a_drop_killed_inside_its_git_and_run_again_ends_as_an_uninterrupted_one(sglpatch, checkout, patches, tmp_path):
    """`rebase --drop 1` of the patch a rebase stopped at, killed inside one of its git commands (each point where
    its `cherry-pick --quit`, `reset --hard`, `update-ref` and the replay after it write a file or hold a ref's
    lock), then `--drop 1` again (as round 13 found it goes through after a kill between git commands). Before:
    at 4 of the points git's lock (CHERRY_PICK_HEAD.lock, index.lock, HEAD.lock, ORIG_HEAD.lock) stayed, the
    second --drop failed in a git (`... reset -q --hard ... failed (128)`), and recover refused, saying the rebase
    was waiting for the user (`--continue`): no way out but deleting a lock by hand. Now a --drop records that it
    began, with ORIG_HEAD, before its first write; run again, it removes the git locks that run left and puts
    ORIG_HEAD back (at 2 points a killed `reset --hard` had left it moved, where an uninterrupted --drop leaves it
    as the user had it): each point ends as an uninterrupted --drop (or, past the drop's record, as round 13
    found, recover settles it); before that record, recover names the --drop to run again."""
    git = stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    drop = ["rebase", "--sglang", checkout, "--drop", "1"]
    cuts = git_cut.EachPoint(drop, checkout, tmp_path)
    points = cuts.whole()
    dropped = _as_dropped(checkout)
    assert len(points) >= 6, points
    left, before_the_record = [], 0
    for point in range(1, len(points) + 1):
        cuts.cut_at(point)
        cut_short = tree_state(checkout)
        settled = git_cut.run_cli(["recover", "--sglang", checkout], {})
        if settled.returncode == 0:
            continue  # past the drop's record: recover rolls back or finishes (round 13)
        assert "was cut short" in settled.stderr and "--drop 1" in settled.stderr, settled.stderr
        assert tree_state(checkout) == cut_short
        before_the_record += 1
        again = git_cut.run_cli(drop, {})
        if again.returncode != 0 or _as_dropped(checkout) != dropped:
            left.append((points[point - 1], again.returncode, again.stderr))
    assert not left, left
    assert before_the_record >= 4, before_the_record
    assert git.run("status", "--porcelain") == ""


# -- two `clean` runs at once ---------------------------------------------------------------------------------

_CLEAN_PAUSED = """
import pathlib, shutil, sys, time
from sglpatch import cli
from sglpatch.commands import clean
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
real = shutil.rmtree
def paused(path, *args, **kwargs):
    ready.write_text("")
    while not go.exists():
        time.sleep(0.05)
    return real(path, *args, **kwargs)
clean.shutil.rmtree = paused
sys.exit(cli.main(["clean"]))
"""


def test_a_second_clean_while_one_deletes_build_is_refused(series_project, sglpatch, tmp_path):
    """`make clean` in two terminals (or a second while the first deletes a large build/): the second found the
    first's `build.deleting`, said "deleting build.deleting, left by a clean cut short" (no clean had been cut
    short) and deleted it beside the first, which then failed in one line naming a file the second had deleted
    (`cannot access f289`, exit 2, its work done). Now one clean runs at a time: the second is refused in one
    line, the first ends as when alone."""
    (series_project / "build" / "reports").mkdir(parents=True)
    (series_project / "build" / "reports" / "drift.md").write_text("a report\n")
    ready, go = tmp_path / "ready", tmp_path / "go"
    first = subprocess.Popen(
        [sys.executable, "-c", _CLEAN_PAUSED, str(ready), str(go)],
        env={**os.environ, "SGLPATCH_PROJECT": str(series_project)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(600):
            if ready.exists() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), first.communicate()
        code, out, err = sglpatch("clean")
    finally:
        go.write_text("")
        out_first, err_first = first.communicate(timeout=60)
    assert code == 2 and err.count("\n") == 1 and "another `sglpatch clean` is deleting" in err, (out, err)
    assert first.returncode == 0, (out_first, err_first)
    assert not (series_project / "build").exists() and not (series_project / "build.deleting").exists()
