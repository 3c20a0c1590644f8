"""apply / status / revert on a git checkout of the real sglang v0.5.14 tree."""

from __future__ import annotations

from sglpatch.git import Git
from sglpatch.series import load_series
from testing.sglang_trees import AUTHOR, BACKEND, NEW_FILE, SECOND, make_series, replace_in
from testing.tree_bytes import fingerprint


def test_apply_makes_one_commit_per_patch_on_a_new_branch(sglpatch, checkout, patches):
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, err
    git = Git(checkout)
    assert git.current_branch() == "sglpatch/v0.5.14"
    log = git.run("log", "--format=%an|%ae|%aI|%s", "v0.5.14..HEAD").splitlines()
    assert log == [
        f"{AUTHOR[0]}|{AUTHOR[1]}|2026-07-01T12:00:00+00:00|[Spec] Mark the global config for the test series",
        f"{AUTHOR[0]}|{AUTHOR[1]}|2026-07-01T12:00:00+00:00|[DSA] Mark the indexer metadata for the test series",
    ]
    body = git.run("log", "-1", "--format=%B", "HEAD~1")
    assert "Why: exercise the toolkit." in body and body.rstrip().endswith("Patch-Group: test-group")
    assert git.run("log", "-1", "--format=%cn", "HEAD") == "Target User"
    assert "# test series: second patch" in (checkout / SECOND).read_text()
    assert (checkout / NEW_FILE).is_file()
    assert git.run("status", "--porcelain") == ""
    assert "note:" not in err  # the user's own committer: nothing to say


NO_IDENTITY_NOTE = "note: git has no identity here (user.name/user.email)"


def test_with_no_git_identity_the_commits_keep_their_authors_and_sglpatch_commits_them(sglpatch, checkout, patches):
    """A fresh machine (no user.name/user.email anywhere): the branch is made all the same, said in one line."""
    git = Git(checkout)
    git.run("config", "--unset", "user.name")
    git.run("config", "--unset", "user.email")
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, err
    people = git.run("log", "--format=%an <%ae> / %cn <%ce>", "v0.5.14..HEAD").splitlines()
    assert people == [f"{AUTHOR[0]} <{AUTHOR[1]}> / sglpatch <sglpatch@localhost>"] * 2
    assert err.count(NO_IDENTITY_NOTE) == 1 and err.count("note:") == 1, err


def test_second_apply_says_already_applied_and_changes_nothing(sglpatch, checkout, patches):
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = fingerprint(checkout)
    code, out, _ = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0
    assert out.startswith("already applied")
    assert fingerprint(checkout) == before


def test_status_reports_each_patch_and_the_pin(sglpatch, checkout, patches):
    code, out, _ = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert code == 0
    assert "at sglang 0.5.14" in out
    assert out.count("applies cleanly") == 2
    sglpatch("apply", "--sglang", checkout, "--patches", patches)
    out = sglpatch("status", "--sglang", checkout, "--patches", patches)[1]
    assert out.count(" applied") == 2 and "applies cleanly" not in out


def test_status_shows_a_conflict_with_file_and_hunk(sglpatch, checkout, patches):
    replace_in(checkout / SECOND, "class GlobalConfig", "class RenamedGlobalConfig")
    Git(checkout).run("commit", "-qam", "local change")
    out = sglpatch("status", "--sglang", checkout, "--patches", patches)[1]
    assert "differs from sglang 0.5.14 in 1 file: " + SECOND in out
    line = [x for x in out.splitlines() if "0002-" in x][0]
    assert "conflicts" in line and SECOND in line and "hunk #1" in line


def test_revert_returns_to_the_previous_branch_byte_for_byte(sglpatch, checkout, patches):
    before = fingerprint(checkout)
    sglpatch("apply", "--sglang", checkout, "--patches", patches)
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert Git(checkout).current_branch() == "main"
    assert Git(checkout).rev_parse("refs/heads/sglpatch/v0.5.14") is None
    after = fingerprint(checkout)
    assert {k: v for k, v in after.items() if not k.startswith(".git/")} == {
        k: v for k, v in before.items() if not k.startswith(".git/")
    }


def test_three_way_applies_onto_a_drifted_base(sglpatch, checkout, patches):
    # Drift elsewhere in a touched file: the pin check refuses, --3way merges.
    replace_in(checkout / SECOND, "global_config = GlobalConfig()", "global_config = GlobalConfig()  # local")
    Git(checkout).run("commit", "-qam", "local drift")
    code, _, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 2 and "differs from the pin" in err and SECOND in err and "--3way" in err
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches, "--3way")
    assert code == 0, err
    text = (checkout / SECOND).read_text()
    assert "# local" in text and "# test series: second patch" in text


def test_the_series_replays_with_plain_git_am(checkout, patches):
    """A user without the tool: `git am --keep-non-patch` of the series, in order."""
    git = Git(checkout)
    names = [p.name for p in load_series(patches).patches]
    git.run("am", "-q", "--keep-non-patch", *[str(patches / n) for n in names])
    subjects = git.run("log", "--format=%s", "v0.5.14..HEAD").splitlines()
    assert subjects == [
        "[Spec] Mark the global config for the test series",
        "[DSA] Mark the indexer metadata for the test series",
    ]
    assert git.run("log", "-1", "--format=%an", "HEAD") == AUTHOR[0]
    assert "# test series: first patch" in (checkout / BACKEND).read_text()


def _stacked_series(tmp_path, base_repo, project_pin):
    """Patch 2 edits a line patch 1 added: patch 1 alone no longer reverse-applies on the result."""
    first = "[DSA] Add a marker line\n\nWhy: stacked edits.\n\nUpstream-PR: 1\n"
    second = "[DSA] Edit the marker line\n\nWhy: stacked edits.\n\nUpstream-PR: 2\n"
    anchor = "class GlobalConfig:"
    return make_series(
        base_repo,
        tmp_path / "dev-stacked",
        tmp_path / "stacked",
        project_pin,
        [
            (first, [(SECOND, anchor, "# marker: one\n" + anchor)]),
            (second, [(SECOND, "# marker: one\n", "# marker: two\n")]),
        ],
    )


def test_series_whose_later_patch_edits_an_earlier_one_is_recognised_as_applied(
    sglpatch, checkout, package, tmp_path, base_repo, project_pin
):
    stacked = _stacked_series(tmp_path, base_repo, project_pin)
    for target in (checkout, package):
        pristine = fingerprint(target)
        assert sglpatch("apply", "--sglang", target, "--patches", stacked)[0] == 0
        applied = fingerprint(target)
        code, out, err = sglpatch("apply", "--sglang", target, "--patches", stacked)
        assert code == 0, err
        assert out.startswith("already applied: all 2 patches")
        assert fingerprint(target) == applied
        code, out, _ = sglpatch("status", "--sglang", target, "--patches", stacked)
        assert code == 0 and out.count(" applied") == 2
        assert sglpatch("revert", "--sglang", target)[0] == 0
        if target == package:
            assert fingerprint(target) == pristine
