"""The hostile trial of round 17: what round 16 left untried (a rebase that stops again after a `--drop`, its
`--drop` cut inside its git; the toolkit's commits and `pr` under a locale that is not UTF-8) and an edit of the
user's beside a resolution at `--continue` (docs/reliability.md, round 17).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sglpatch.git import Git
from testing import git_cut, sglang_trees
from testing.pr_series import GROUPS, pr_project, pr_series  # noqa: F401  (the fixture, found by name)
from testing.sglang_trees import BACKEND, SECOND, make_series, stopped_at_a_conflict, upstream_branches
from testing.tree_bytes import tree_state

# -- a rebase that stops again after a --drop, its --drop cut inside its git (testing/git_cut.py) -------------------


def _chained_series(base_repo, project_pin, tmp_path):
    """Three patches: the second edits the line the first adds, so that, the first dropped on `newer` (whose edit
    of that line conflicts with the first), the second conflicts in turn: the rebase stops a second time."""
    first = "[DSA] Mark the metadata\n\nWhy: a first mark.\n\nUpstream-PR: 27166\n"
    second = "[DSA] Amend the mark\n\nWhy: builds on the first.\n\nUpstream-PR: 27167\n"
    third = "[Spec] Mark the global config\n\nWhy: a patch of its own.\n\nUpstream-PR: 29787\n"
    return make_series(
        base_repo,
        tmp_path / "dev",
        tmp_path / "patches",
        project_pin,
        [
            (first, [(BACKEND, "class DSAIndexerMetadata", "# first mark\nclass DSAIndexerMetadata")]),
            (second, [(BACKEND, "# first mark\n", "# first mark, amended by the second\n")]),
            (third, [(SECOND, "class GlobalConfig", "# third\nclass GlobalConfig")]),
        ],
    )


def _stopped_at_the_first(sglpatch, checkout, base_repo, project_pin, tmp_path) -> Git:
    patches = _chained_series(base_repo, project_pin, tmp_path)
    git = upstream_branches(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    args = ("--patches", patches, "--report-dir", tmp_path / "report", "--onto", "newer")
    code, out, err = sglpatch("rebase", "--sglang", checkout, *args)
    assert code == 1 and "0001-DSA-Mark-the-metadata.patch conflicts" in err, (out, err)
    return git


def _stopped_again(checkout) -> dict[str, str]:
    """The checkout byte for byte at the second stop, but for the run that saved the rebase's state last."""
    state_file = ".git/sglpatch-rebase/state.json"
    state = {k: v for k, v in tree_state(checkout).items() if k != state_file}
    saved = json.loads((checkout / state_file).read_text())
    return {**state, "state": json.dumps({k: v for k, v in saved.items() if k != "run"}, sort_keys=True)}


def _points_of_a_drop_that_stops_again(cuts: git_cut.EachPoint, checkout) -> list[str]:
    """`EachPoint.whole` for a `--drop 1` that ends stopped at patch 2 (exit 1): its points, listed uncut."""
    env = git_cut.environment(cuts.cut, checkout, cuts.count, trace=cuts.trace)
    done = git_cut.run_cli(cuts.args, env)
    assert done.returncode == 1 and "0002-DSA-Amend-the-mark.patch conflicts" in done.stderr, done.stderr
    return cuts.trace.read_text().splitlines()


def _rebase(checkout, *args) -> subprocess.CompletedProcess:
    return git_cut.run_cli(["rebase", "--sglang", checkout, *args], {})


def _one_line(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 2 and done.stderr.count("\n") == 1


def test_a_later_drop_after_a_drop_cut_short_is_refused_until_that_drop_runs_again(
    sglpatch, checkout, base_repo, project_pin, tmp_path
):
    """A rebase stopped at patch 1, `--drop 1` (after which patch 2 conflicts in turn: the rebase stops again),
    killed inside its git at each of its points, then `--drop 2` (the user, seeing patch 2 needs patch 1, leaves
    it out too). Before: at each of the 5 points before the drop's record `--drop 2` said "will leave out ...; a
    rebase is stopped at 0001 (conflict): resolve it, then --continue", exit 0, its save making the cut run's locks
    (CHERRY_PICK_HEAD.lock, index.lock, HEAD.lock, ORIG_HEAD.lock) older than the state: --continue then named
    --drop 1 or --abort, both failed ("... was not left by the interrupted sglpatch run ... delete it"), and recover
    named --drop 1: no way out without deleting a lock by hand. Now `--drop 2` is refused in one line, nothing
    changed, naming `--drop 1` again and `--abort`; `--drop 1` then ends at the second stop as an uncut one. Past
    the record (the replay's pick of patch 2 cut), `--drop 2` names recover, which rolls the rebase back."""
    _stopped_at_the_first(sglpatch, checkout, base_repo, project_pin, tmp_path)
    cuts = git_cut.EachPoint(["rebase", "--sglang", checkout, "--drop", "1"], checkout, tmp_path)
    points = _points_of_a_drop_that_stops_again(cuts, checkout)
    stopped_again = _stopped_again(checkout)
    assert _rebase(checkout, "--abort").returncode == 0
    as_it_was = tree_state(checkout)
    refused = 0
    for point in range(1, len(points) + 1):
        cuts.cut_at(point)
        cut_short = tree_state(checkout)
        later = _rebase(checkout, "--drop", "2")
        assert _one_line(later) and tree_state(checkout) == cut_short, (points[point - 1], later.stderr)
        if "recover" in later.stderr:  # past the drop's record
            assert git_cut.run_cli(["recover", "--sglang", checkout], {}).returncode == 0
            assert tree_state(checkout) == as_it_was, points[point - 1]
            continue
        assert "--drop 1" in later.stderr and "--abort" in later.stderr, later.stderr
        again = _rebase(checkout, "--drop", "1")
        assert again.returncode == 1 and "0002-DSA-Amend-the-mark.patch conflicts" in again.stderr, again.stderr
        assert _stopped_again(checkout) == stopped_again, points[point - 1]
        refused += 1
    assert refused >= 4, refused


def test_a_drop_cut_inside_its_reset_is_not_taken_for_an_edit_of_the_users(
    sglpatch, checkout, base_repo, project_pin, tmp_path
):
    """While the rebase waits at patch 1, the user commits on its detached HEAD (their resolution, then a file of
    their own, `MYNOTE.txt`), then runs `--drop 1` (their commits are kept under refs/sglpatch/backup/dropped-*),
    killed inside its git at each point. Before: where the kill fell inside the drop's `reset --hard` (it had
    removed MYNOTE.txt, HEAD not yet moved), `--drop 1` again, and `--abort`, refused: "MYNOTE.txt changed while
    the rebase waited, and 0001 ... does not touch it: ... would throw that away", advising to save a change the
    user never made. Now a file as the drop's reset leaves it (or, for --abort, as the original branch has it:
    none) is the cut drop's: `--drop 1` again ends at the second stop, `--abort` back where the rebase began, the
    user's commits kept under the ref the cut run made."""
    git = _stopped_at_the_first(sglpatch, checkout, base_repo, project_pin, tmp_path)
    git.run("checkout", "HEAD", "--", BACKEND)  # resolved as upstream has it, committed
    git.run("commit", "-q", "--allow-empty", "--no-edit")
    (checkout / "MYNOTE.txt").write_text("a note of mine\n")
    git.run("add", "MYNOTE.txt")
    git.run("commit", "-q", "-m", "a note of mine")
    mine = git.run("rev-parse", "HEAD")
    cuts = git_cut.EachPoint(["rebase", "--sglang", checkout, "--drop", "1"], checkout, tmp_path)
    points = _points_of_a_drop_that_stops_again(cuts, checkout)
    stopped_again = _stopped_again(checkout)
    cuts.restore()
    assert _rebase(checkout, "--abort").returncode == 0
    aborted = {k: v for k, v in tree_state(checkout).items() if "refs/sglpatch/backup/" not in k}
    left = []
    for point in range(1, len(points) + 1):
        for way, expected, code in (("--drop", stopped_again, 1), ("--abort", aborted, 0)):
            cuts.cut_at(point)
            if git_cut.run_cli(["recover", "--sglang", checkout], {}).returncode == 0:
                break  # past the drop's record: recover rolled the rebase back (the test above)
            done = _rebase(checkout, *([way, "1"] if way == "--drop" else [way]))
            now = _stopped_again(checkout) if way == "--drop" else tree_state(checkout)
            now = {k: v for k, v in now.items() if "refs/sglpatch/backup/" not in k}
            expected = {k: v for k, v in expected.items() if "refs/sglpatch/backup/" not in k}
            kept = git.run("for-each-ref", "--contains", mine, "--format=%(refname)", "refs/sglpatch/backup/")
            if done.returncode != code or now != expected or not kept:
                left.append((points[point - 1], way, done.returncode, done.stderr[-300:]))
    assert not left, left


# -- --continue with an edit of the user's to a file a later patch changes ------------------------------------------


def test_continue_keeps_an_edit_of_the_users_to_a_file_the_next_patch_changes(sglpatch, checkout, patches, tmp_path):
    """While the rebase waits at patch 1, the user resolves it (`git add`) and, beside it, edits
    `global_config.py`, which patch 2 changes (a debugging line, not staged), then runs `--continue`. Before: git's
    cherry-pick of patch 2 refused ("Your local changes ... would be overwritten by merge"), having written nothing,
    and the rebase took that pick back with `git reset --hard`: the edit was gone, the stop saying "git could not
    commit 0002 (Your local changes to the following files would be overwritten by merge:)", exit 1; an `--abort`
    then said "as it was". Now a pick that wrote nothing is not taken back: the rebase stops at patch 2 naming the
    file, the edit as the user left it, `--abort` refuses it (it is not patch 2's: that pick was never made), and
    once the user puts it aside `--continue` finishes."""
    git = stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    git.run("checkout", "--theirs", "--", BACKEND)  # the patch's side of the conflict
    git.run("add", BACKEND)
    mine = checkout / SECOND
    mine.write_text(mine.read_text() + "print('my debugging line')\n")
    edited = mine.read_bytes()
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--continue")
    assert mine.read_bytes() == edited
    assert code == 1 and "stopped at 0002-" in err and SECOND in err, (out, err)
    waiting = tree_state(checkout)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 2 and err.count("\n") == 1 and SECOND in err, (out, err)
    assert tree_state(checkout) == waiting
    saved = git.run("diff", "--", SECOND, strip=False)
    git.run("checkout", "HEAD", "--", SECOND)
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--continue")
    assert code == 0 and "rebased onto newer" in out, (out, err)
    git.run_with_input(["apply"], saved.encode())
    assert mine.read_bytes().endswith(b"print('my debugging line')\n")


# -- names past ASCII under a locale that is not UTF-8 -----------------------------------------------------------


def _locale(tmp_path, name: str, charmap: str) -> dict[str, str]:
    """The environment of a shell under locale `name` (made with localedef into a folder of the test's, as rounds
    13 and 14 did), whose charset is `charmap`: Python writes a child's environment in it."""
    locales = tmp_path / "locales"
    locales.mkdir(exist_ok=True)
    made = subprocess.run(
        ["localedef", "-i", name.split(".")[0], "-f", charmap, str(locales / name)], capture_output=True
    )
    if made.returncode not in (0, 1) or not (locales / name).exists():
        pytest.skip(f"no {name} locale can be made here: {made.stderr.decode(errors='replace')}")
    return {"LOCPATH": str(locales), "LC_ALL": name}


def _cli(*args, **env) -> subprocess.CompletedProcess:
    """The CLI in a child process started under `env` (a locale is the process's from its start)."""
    return subprocess.run(
        [sys.executable, "-m", "sglpatch", *map(str, args)], capture_output=True, env={**os.environ, **env}
    )


def _files(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


_LOCALES = [
    ("tr_TR.ISO-8859-9", "ISO-8859-9", "Şükrü Çağlar", "[DSA] Mark the Işık metadata"),
    ("de_DE.ISO-8859-1", "ISO-8859-1", "Łukasz Żółć 漢字", "[DSA] Mark the Łódź 漢字 metadata"),
]


@pytest.mark.parametrize("name, charmap, author, subject", _LOCALES, ids=["tr_TR.ISO-8859-9", "de_DE.ISO-8859-1"])
def test_apply_and_a_rebase_under_a_locale_that_is_not_utf8_keep_the_authors_name(
    checkout, base_repo, project_pin, tmp_path, monkeypatch, name, charmap, author, subject
):
    """A user whose locale is not UTF-8 (a Turkish or German machine set up with ISO-8859-9 or -1), a series whose
    author and subject are past ASCII, apply, then a rebase onto a branch that changes no file of it. Before: the
    toolkit handed git each patch's author in the locale's encoding (Python writes a child's environment so) and
    git, taking bytes that are not UTF-8 for Latin-1, committed `Şükrü Çağlar` as `Þükrü Çaðlar`: the rebase wrote
    both patches again with that From, "rebased", exit 0; a name past the locale's charset (`Łukasz` under
    ISO-8859-1) failed apply with a Python traceback (UnicodeEncodeError). Now the names go to git in UTF-8: the
    commits hold the patches' names, the series the same bytes."""
    locale = _locale(tmp_path, name, charmap)
    monkeypatch.setitem(sglang_trees.TESTER_IDENTITY, "GIT_AUTHOR_NAME", author)
    message = f"{subject}\n\nWhy: a naïve test.\n\nUpstream-PR: 27166\n"
    edits = [(BACKEND, "class DSAIndexerMetadata", "# café\nclass DSAIndexerMetadata")]
    patches = make_series(base_repo, tmp_path / "dev", tmp_path / "patches", project_pin, [(message, edits)])
    written = _files(patches)
    upstream_branches(checkout, quiet=True)
    done = _cli("apply", "--sglang", checkout, "--patches", patches, **locale)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-500:]
    assert Git(checkout).run("log", "-1", "--format=%an") == author
    args = ("--report-dir", tmp_path / "report", "--onto", "quiet", "--release", "0.5.14")
    done = _cli("rebase", "--sglang", checkout, "--patches", patches, *args, **locale)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-500:]
    assert _files(patches) == written


def _pr_series_past_ascii(base_repo, project_pin, tmp_path, monkeypatch, author):
    """testing/pr_series.py's two groups, by `author`, the first patch's subject and body and the first group's
    title and note past ASCII (pr-groups.json in UTF-8, as an editor writes it)."""
    monkeypatch.setitem(sglang_trees.TESTER_IDENTITY, "GIT_AUTHOR_NAME", author)
    groups = json.loads(json.dumps(GROUPS))
    groups["groups"][0]["title"] = "[DSA] First group, by Zoë Ångström and Łukasz 漢字"
    groups["groups"][0]["prior_art"][0]["note"] = "the change Łukasz Żółć made (漢字)"
    return pr_series(
        base_repo,
        tmp_path,
        project_pin,
        "series",
        subject="[DSA] Add a verbosity default for Zoë 漢字",
        why="the first group needs a café change (Łódź).",
        groups=groups,
    )


def _pr_made(checkout, out) -> tuple[dict, dict]:
    """Every commit of pr's branches, raw, and every body it wrote."""
    git = Git(checkout)
    branches = git.run("for-each-ref", "--format=%(refname)", "refs/heads/sglpatch-pr/").split()
    commits = {
        b: [git.run_bytes("cat-file", "commit", c) for c in git.run("rev-list", f"v0.5.14..{b}").split()]
        for b in branches
    }
    return commits, _files(out)


@pytest.mark.usefixtures("pr_project")
@pytest.mark.parametrize("author", ["Łukasz Żółć 漢字", "Ada Patchwright"], ids=["past-latin-1", "ascii"])
def test_pr_under_a_latin1_locale_writes_the_branches_and_bodies_as_under_utf8(
    checkout, base_repo, project_pin, tmp_path, monkeypatch, author
):
    """`pr --out` (a dry run) under `de_DE.ISO-8859-1`, a series by `author` whose first subject and body are past
    ASCII, and a pr-groups.json whose first title and prior-art note are too, compared with the same run under
    C.UTF-8. Before: with the author past Latin-1 pr failed with a Python traceback (UnicodeEncodeError, building
    the branches); with an ASCII author it went through, but pr-groups.json was read in the locale's encoding: the
    bodies said `Ã…ngstrÃ¶m` (the stacked group's line naming the group it depends on) and `Å\\x81ukasz` (the prior
    art). Now the branches' commits and the bodies are the same bytes as under UTF-8."""
    patches = _pr_series_past_ascii(base_repo, project_pin, tmp_path, monkeypatch, author)
    saved = tmp_path / "saved"
    subprocess.run(["cp", "-a", str(checkout), str(saved)], check=True)
    fixed = {"GIT_COMMITTER_DATE": "2026-07-02T12:00:00+00:00", "SGLPATCH_PROJECT": str(tmp_path / "project")}
    made = []
    for locale in ({"LC_ALL": "C.UTF-8"}, _locale(tmp_path, "de_DE.ISO-8859-1", "ISO-8859-1")):
        subprocess.run(["rm", "-rf", str(checkout)], check=True)
        subprocess.run(["cp", "-a", str(saved), str(checkout)], check=True)
        out = tmp_path / f"bodies-{locale['LC_ALL']}"
        done = _cli("pr", "--sglang", checkout, "--patches", patches, "--out", out, **fixed, **locale)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-500:]
        made.append(_pr_made(checkout, out))
    assert "Łukasz Żółć made (漢字)" in made[0][1]["base-group.md"].decode()
    assert made[1] == made[0]
