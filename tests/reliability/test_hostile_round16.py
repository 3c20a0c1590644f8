"""The hostile trial of round 16: what round 15 left untried (a `rebase --drop` cut inside its git, then `--abort`
or `--continue`; the user's `core.hooksPath`; `i18n.commitEncoding` / `i18n.logOutputEncoding` with names and
subjects past ASCII) and an `--abort` of a rebase killed mid-way (docs/reliability.md, round 16).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sglpatch.git import Git
from testing import git_cut, sglang_trees
from testing.killed_cli import cli_child, point_after
from testing.sglang_trees import BACKEND, SECOND, make_series, stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import tree_state

# -- a --drop cut inside its git, then --abort or --continue (testing/git_cut.py) -------------------------------


def _cut_drops(sglpatch, checkout, patches, tmp_path) -> tuple[git_cut.EachPoint, list[str], dict[str, str]]:
    """A rebase stopped at a conflict; its `--drop 1` cut at each point, and the checkout as an uncut `--abort`
    from the stop leaves it."""
    stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    cuts = git_cut.EachPoint(["rebase", "--sglang", checkout, "--drop", "1"], checkout, tmp_path)
    points = cuts.whole()
    cuts.restore()
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


# -- the user's core.hooksPath ---------------------------------------------------------------------------------------


def _hooks_path(tmp_path, name: str, body: str) -> dict[str, str]:
    """A ~/.gitconfig naming a hooks folder (`core.hooksPath`, as a team's shared hooks or a tool such as
    git-secrets set it) that holds one hook, `name`; the environment that makes it the user's."""
    hooks = tmp_path / "my-hooks"
    hooks.mkdir()
    (hooks / name).write_text(f"#!/bin/sh\n{body}")
    (hooks / name).chmod(0o755)
    config = tmp_path / "user-gitconfig"
    config.write_text(f"[user]\n\tuseConfigOnly = true\n[core]\n\thooksPath = {hooks}\n")
    return {"GIT_CONFIG_GLOBAL": str(config)}


# refuses a ref update in a repository that has no remote: a guard against work kept only on this machine
_NO_REMOTE_NO_UPDATE = (
    '[ "$1" = prepared ] || exit 0\n'
    '[ -n "$(git remote)" ] && exit 0\n'
    "echo 'refused by my hook: this repository has no remote' >&2\nexit 1\n"
)


def test_apply_status_and_revert_go_through_a_users_hooks_path_that_guards_repositories_with_no_remote(
    sglpatch, checkout, patches, tmp_path, monkeypatch
):
    """`core.hooksPath` in ~/.gitconfig naming a reference-transaction hook that refuses ref updates in a
    repository with no remote (the user's checkout, a clone, has one). Before: the hook ran in the toolkit's own
    scratch repositories (made from no template since round 15, but hooksPath is config, not template): apply
    failed in one line, "``git -C /tmp/sglpatch-ws-... update-ref refs/heads/copied ...` failed (128)``", with no
    cause (nothing changed). Now no hook of the user's runs in the toolkit's own repositories: apply, status and
    revert go through, the checkout as it was (the user's hook still runs in the user's checkout)."""
    for key, value in _hooks_path(tmp_path, "reference-transaction", _NO_REMOTE_NO_UPDATE).items():
        monkeypatch.setenv(key, value)
    sglang_trees.apply_status_revert(sglpatch, checkout, patches)


def test_a_rebase_goes_through_a_post_checkout_hook_of_the_users_that_fails(
    sglpatch, checkout, patches, tmp_path, monkeypatch
):
    """`core.hooksPath` naming a post-checkout hook that prints and exits 1 (one that rebuilds something after each
    switch, and failed). Apply goes through with a note (the switch is done; git says a post-checkout hook cannot
    undo it). Before: a rebase failed at its last step, the `git checkout -b` of the new branch (done, then the hook
    exited 1): "``... checkout -q -b sglpatch/v0.5.14-...` failed (1)``", exit 2, with no word of its state: the
    checkout on the new branch, the series folder marked as being rewritten (status then refused it: run recover).
    Now the rebase notes the hook's exit as apply does and finishes: rebased, status reads the series."""
    upstream_branches(checkout, quiet=True)
    for key, value in _hooks_path(tmp_path, "post-checkout", "echo 'my hook: rebuilt'\nexit 1\n").items():
        monkeypatch.setenv(key, value)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--report-dir", tmp_path / "report", "--onto", "quiet", "--release", "0.5.14")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--patches", patches, *args)
    assert code == 0 and "rebased onto quiet" in out and "post-checkout hook exited 1" in out + err, (out, err)
    code, out, err = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert code == 0 and "the series is in" in out, (out, err)


# -- i18n.commitEncoding / i18n.logOutputEncoding ------------------------------------------------------------------


def _series_past_ascii(base_repo, project_pin, tmp_path, monkeypatch, author: str, subject: str):
    """A series of two patches by `author`, the first's subject `subject`, its body and its line past ASCII too."""
    monkeypatch.setitem(sglang_trees.TESTER_IDENTITY, "GIT_AUTHOR_NAME", author)
    first = f"{subject}\n\nWhy: a naïve test.\n\nWhat: one comment.\n\nUpstream-PR: 27166\n"
    second = "[Spec] Mark the global config\n\nWhy: a second patch.\n\nUpstream-PR: 29787\n"
    return make_series(
        base_repo,
        tmp_path / "dev",
        tmp_path / "patches",
        project_pin,
        [
            (first, [(BACKEND, "class DSAIndexerMetadata", "# café\nclass DSAIndexerMetadata")]),
            (second, [(SECOND, "class GlobalConfig", "# second\nclass GlobalConfig")]),
        ],
    )


def _files(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


@pytest.mark.parametrize(
    "author, subject",
    [("Zoë Ångström", "[DSA] Mark the café metadata"), ("Łukasz Żółć 漢字", "[DSA] Mark the Łódź 漢字 metadata")],
    ids=["latin-1", "past-latin-1"],
)
def test_a_rebase_under_a_latin1_commit_encoding_keeps_the_series_bytes(
    sglpatch, checkout, base_repo, project_pin, tmp_path, monkeypatch, author, subject
):
    """`i18n.commitEncoding` and `i18n.logOutputEncoding` set to ISO-8859-1 in ~/.gitconfig (a user whose other
    repositories keep Latin-1 messages), a series whose author, subject and body are past ASCII, then apply and a
    rebase onto a branch that changes no file of it. Before: apply's commits said `encoding ISO-8859-1` over the
    patches' UTF-8 text, and the rebase wrote every patch again from them decoded as Latin-1: `Zoë` became `ZoÃ«`
    in both patches' From, the subject and the body too, "rebased", exit 0. Now every git the toolkit runs reads
    and writes its messages as UTF-8: the series the same bytes."""
    patches = _series_past_ascii(base_repo, project_pin, tmp_path, monkeypatch, author, subject)
    written = _files(patches)
    upstream_branches(checkout, quiet=True)
    config = tmp_path / "user-gitconfig"
    config.write_text(
        "[user]\n\tuseConfigOnly = true\n[i18n]\n\tcommitEncoding = ISO-8859-1\n\tlogOutputEncoding = ISO-8859-1\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    log = Git(checkout).with_env(LC_ALL="C.UTF-8").run("log", "-2", "--encoding=UTF-8", "--format=%an%n%s")
    assert log.splitlines() == [author, "[Spec] Mark the global config", author, subject]
    args = ("--report-dir", tmp_path / "report", "--onto", "quiet", "--release", "0.5.14")
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--patches", patches, *args)
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert _files(patches) == written
