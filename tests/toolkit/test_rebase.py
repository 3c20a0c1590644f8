"""rebase on real trees: v0.5.14 -> 0.5.15 -> 0.5.16 -> 0.5.17 from their PyPI wheels, one commit each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sglpatch.git import Git
from sglpatch.lines import default_patch_dir
from sglpatch.series import load_series
from sglpatch.wheels import cache_dir
from testing.sglang_trees import BACKEND, OVERLAP, SECOND, changed_line, make_series, one_patch_series
from testing.tree_bytes import fingerprint

pytestmark = pytest.mark.network  # releases 0.5.15 to 0.5.17 from PyPI, unless cached

SPEC_DIR = "python/sglang/srt/speculative"
BROKEN_SYNTAX = (SECOND, "class GlobalConfig", "class GlobalConfig(:\nclass _Unused")  # a prefix that cannot compile


def rebase(sglpatch, chain, patches, tmp_path, *args):
    return sglpatch("rebase", "--sglang", chain, "--patches", patches, "--report-dir", tmp_path / "report", *args)


def test_clean_rebase_regenerates_the_series_and_writes_a_range_diff(sglpatch, chain, patches, tmp_path):
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    git = Git(chain)
    assert git.current_branch() == "sglpatch/v0.5.16"
    assert git.run("rev-list", "--count", "v0.5.16..HEAD") == "2"
    assert all(word in out for word in ("0001-", "0002-")) and "conflict" not in out
    pin = json.loads((patches / "pin.json").read_text())
    assert pin["sglang"]["release"] == "0.5.16" and pin["wheel"]["filename"].startswith("sglang-0.5.16-")
    assert pin["sglang"]["date"] == "2026-07-25"  # 0.5.16's wheel has no scm record: PyPI's upload day
    for path, blob in pin["blobs"].items():
        at_base = git.try_run("rev-parse", f"v0.5.16:{path}")
        assert (at_base[1] if at_base[0] == 0 else "") == blob  # "" = a file the series creates
    report = (tmp_path / "report" / "range-diff-v0.5.14-to-v0.5.16.txt").read_text()
    assert "[DSA] Mark the indexer metadata" in report and "[Spec] Mark the global config" in report
    # the regenerated series applies as it is to a fresh v0.5.16 checkout
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", "--branch", "v0.5.16", str(chain), str(fresh)], check=True)
    code, _, err = sglpatch("apply", "--sglang", fresh, "--patches", patches)
    assert code == 0, err
    assert load_series(patches).patches[0].name.startswith("0001-")


def test_rebase_onto_a_release_version_fetches_it(sglpatch, checkout, patches, tmp_path):
    sglpatch("apply", "--sglang", checkout, "--patches", patches)
    code, out, err = rebase(sglpatch, checkout, patches, tmp_path, "--onto", "0.5.15")
    assert code == 0, err
    assert Git(checkout).rev_parse("v0.5.15") is not None
    assert json.loads((patches / "pin.json").read_text())["sglang"]["release"] == "0.5.15"


def forget_identity(repo):
    """No user.name/user.email for `repo` (the suite's global config has none): a fresh machine."""
    Git(repo).run("config", "--unset", "user.name")
    Git(repo).run("config", "--unset", "user.email")


def test_a_rebase_with_no_git_identity_keeps_the_authors_and_says_who_commits(sglpatch, chain, patches, tmp_path):
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    forget_identity(chain)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 0, err
    people = Git(chain).run("log", "--format=%an <%ae> / %cn <%ce>", "v0.5.16..HEAD").splitlines()
    assert people == ["Ada Patchwright <ada@example.com> / sglpatch <sglpatch@localhost>"] * 2
    assert err.count("note: git has no identity here") == 1, err


def own_copy(template, tmp_path):
    """A test's own copy of a series made once for the module, under the same folder name."""
    dest = tmp_path / template.name
    shutil.copytree(template, dest)
    return dest


@pytest.fixture(scope="module")
def conflicting_series_template(tmp_path_factory, base_repo, project_pin, release_chain):
    """Made once (a clone, a commit, an export); each test gets its own copy."""
    tmp = tmp_path_factory.mktemp("conflicting")
    line = changed_line(release_chain, OVERLAP)
    message = "[Spec] Touch a line upstream rewrites\n\nWhy: to conflict.\n\nUpstream-PR: 1\n"
    return one_patch_series(base_repo, project_pin, tmp / "conflicting", message, (OVERLAP, line, line + "  # ours"))


@pytest.fixture
def conflicting_series(tmp_path, conflicting_series_template):
    return own_copy(conflicting_series_template, tmp_path)


def test_conflict_stops_then_abort_restores_everything(sglpatch, chain, conflicting_series, tmp_path):
    sglpatch("apply", "--sglang", chain, "--patches", conflicting_series)
    git = Git(chain)
    (chain / "untracked.txt").write_text("keep me\n")
    before, head, series_before = fingerprint(chain), git.run("rev-parse", "HEAD"), fingerprint(conflicting_series)
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")
    assert code == 1 and "conflicts in " + OVERLAP in err and "`sglpatch rebase --continue --sglang " in err
    assert "<<<<<<<" in (chain / OVERLAP).read_text()
    assert git.run("for-each-ref", "--format=%(objectname)", "refs/sglpatch/backup/") == head
    code, out, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--abort")
    assert code == 0, err
    after = fingerprint(chain)
    assert {k: v for k, v in after.items() if not k.startswith(".git/")} == {
        k: v for k, v in before.items() if not k.startswith(".git/")
    }
    assert git.current_branch() == "sglpatch/v0.5.14" and git.run("rev-parse", "HEAD") == head
    assert fingerprint(conflicting_series) == series_before


def test_conflict_then_continue_after_resolving(sglpatch, chain, conflicting_series, tmp_path):
    sglpatch("apply", "--sglang", chain, "--patches", conflicting_series)
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "still unresolved" in err
    git = Git(chain)
    git.run("checkout", "--theirs", "--", OVERLAP)  # keep the patch's side of the conflict
    git.run("add", OVERLAP)
    code, out, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 0, err
    assert "resolved by hand" in out
    assert git.current_branch() == "sglpatch/v0.5.15"
    assert "  # ours" in (chain / OVERLAP).read_text() and "<<<<<<<" not in (chain / OVERLAP).read_text()
    assert json.loads((conflicting_series / "pin.json").read_text())["sglang"]["release"] == "0.5.15"


def test_a_stopped_rebase_waits_for_the_user_and_nothing_else_runs(sglpatch, chain, conflicting_series, tmp_path):
    """A conflict stop is not an interruption: recover, apply and a new rebase refuse and say how to go on."""
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    stopped = fingerprint(chain)
    code, _, err = sglpatch("recover", "--sglang", chain)
    assert (
        code == 2
        and "stopped at 0001-" in err
        and "waiting for you" in err
        and "`sglpatch rebase --abort --sglang " in err
    )
    code, _, err = sglpatch("apply", "--sglang", chain, "--patches", conflicting_series)
    assert code == 2 and "stopped at 0001-" in err and "`sglpatch rebase --continue --sglang " in err
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.16")
    assert code == 2 and "stopped at 0001-" in err
    code, out, err = sglpatch("status", "--sglang", chain, "--patches", conflicting_series)
    assert code == 0 and "NOTE:   a rebase is stopped at 0001-" in out, err
    assert fingerprint(chain) == stopped
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--abort")[0] == 0


def test_an_interrupted_continue_rolls_back_but_keeps_the_resolution(sglpatch, chain, conflicting_series, tmp_path):
    sglpatch("apply", "--sglang", chain, "--patches", conflicting_series)
    git = Git(chain)
    head, series_before = git.run("rev-parse", "HEAD"), fingerprint(conflicting_series)
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    git.run("checkout", "--theirs", "--", OVERLAP)
    git.run("add", OVERLAP)
    args = ["rebase", "--sglang", chain, "--patches", conflicting_series, "--report-dir", tmp_path / "report"]
    killed = subprocess.run(
        [sys.executable, "-m", "sglpatch", *map(str, args), "--continue"],
        capture_output=True,
        text=True,
        env={**os.environ, "SGLPATCH_FAULT_AT": "1", "SGLPATCH_FAULT_SIGNAL": "TERM"},
    )
    assert killed.returncode == 143, killed.stderr
    assert "interrupted by SIGTERM; the rebase was rolled back" in killed.stderr and "is as it was" in killed.stderr
    kept = git.run("for-each-ref", "--format=%(refname)", "refs/sglpatch/backup/resolved-*")
    assert kept and kept in killed.stderr
    assert "  # ours" in git.run("show", f"{kept}:{OVERLAP}")
    assert git.current_branch() == "sglpatch/v0.5.14" and git.run("rev-parse", "HEAD") == head
    assert not (git.git_dir() / "sglpatch-rebase").exists() and fingerprint(conflicting_series) == series_before


def test_continue_after_the_user_committed_the_resolution(sglpatch, chain, conflicting_series, tmp_path):
    """`git commit` instead of `git add` alone (as git rebase users do) is taken as the resolution."""
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    git = Git(chain)
    git.run("checkout", "--theirs", "--", OVERLAP)
    git.run("add", OVERLAP)
    git.with_env(GIT_EDITOR="true").run("commit", "-q", "--no-edit")
    code, out, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 0, err
    assert "resolved by hand" in out and git.current_branch() == "sglpatch/v0.5.15"
    assert git.run("rev-list", "--count", "v0.5.15..HEAD") == "1" and "  # ours" in (chain / OVERLAP).read_text()


def test_continue_after_the_user_dropped_the_pick_says_to_abort(sglpatch, chain, conflicting_series, tmp_path):
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    Git(chain).run("cherry-pick", "--abort")
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "is gone and nothing was committed" in err and "`sglpatch rebase --abort --sglang " in err


def test_continue_with_no_git_identity_commits_the_resolution(sglpatch, chain, conflicting_series, tmp_path):
    """Committing the resolution needs a committer: sglpatch's own where git has none."""
    forget_identity(chain)
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    git = Git(chain)
    git.run("checkout", "--theirs", "--", OVERLAP)
    git.run("add", OVERLAP)
    code, out, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 0, err
    assert git.run("log", "-1", "--format=%an / %cn", "HEAD") == "Ada Patchwright / sglpatch"


def test_abort_leaves_a_branch_the_user_moved_meanwhile(sglpatch, chain, conflicting_series, tmp_path):
    """Abort puts HEAD back on the original branch, not the branch back where it was: commits made on it
    while the rebase was stopped are the user's."""
    sglpatch("apply", "--sglang", chain, "--patches", conflicting_series)
    git = Git(chain)
    branch, head = git.current_branch(), git.run("rev-parse", "HEAD")
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    moved = git.run("commit-tree", f"{head}^{{tree}}", "-p", head, "-m", "made while the rebase was stopped")
    git.run("update-ref", f"refs/heads/{branch}", moved)
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--abort")[0] == 0
    assert git.current_branch() == branch and git.run("rev-parse", "HEAD") == moved


def test_continue_refuses_a_series_folder_changed_while_stopped(sglpatch, chain, conflicting_series, patches, tmp_path):
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    for old in conflicting_series.glob("*.patch"):
        old.unlink()
    for new in patches.iterdir():
        (conflicting_series / new.name).write_bytes(new.read_bytes())
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "changed since the rebase stopped" in err


def test_an_error_after_the_picks_stops_and_continue_retries(sglpatch, chain, patches, tmp_path, monkeypatch):
    """The new pin needs the release's wheel: with PyPI out of reach the rebase stops (it does not roll back
    the picks), says why, and --continue finishes once the wheel can be had."""
    cache = str(cache_dir())
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "empty-cache"))
    for key, value in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}.items():
        monkeypatch.setenv(key, value)
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.15")
    assert (
        code == 1 and "the rebase is stopped at the end" in err and "`sglpatch rebase --continue --sglang " in err
    ), err
    assert Git(chain).current_branch() is None
    monkeypatch.setenv("SGLPATCH_CACHE", cache)
    for key in ("PIP_INDEX_URL", "PIP_RETRIES", "PIP_TIMEOUT"):
        monkeypatch.delenv(key)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--continue")
    assert code == 0, err
    assert Git(chain).current_branch() == "sglpatch/v0.5.15"
    assert json.loads((patches / "pin.json").read_text())["sglang"]["release"] == "0.5.15"


def test_continue_refuses_when_head_left_the_stopped_rebase(sglpatch, chain, conflicting_series, tmp_path):
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    git = Git(chain)
    git.run("cherry-pick", "--abort")
    git.run("checkout", "-q", "work")
    before = fingerprint(chain)
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "HEAD is on branch work, not where the rebase stopped" in err
    assert fingerprint(chain) == before and git.run("rev-parse", "work") == git.run("rev-parse", "v0.5.14")


def test_continue_refuses_an_edited_pin_and_an_old_state_can_still_be_aborted(
    sglpatch, chain, conflicting_series, tmp_path
):
    """Every file of the series folder counts (pin.json too); a state lacking what --continue reads (as an
    older sglpatch wrote it) is refused for --continue but can be aborted."""
    assert rebase(sglpatch, chain, conflicting_series, tmp_path, "--onto", "v0.5.15")[0] == 1
    pin = conflicting_series / "pin.json"
    original = pin.read_bytes()
    pin.write_bytes(original.replace(b'"0.5.14"', b'"0.5.99"'))
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "changed since the rebase stopped" in err
    pin.write_bytes(original)
    state_path = chain / ".git" / "sglpatch-rebase" / "state.json"
    state = json.loads(state_path.read_text())
    for key in ("phase", "series_digest", "patches", "backup_made"):
        state.pop(key)
    state_path.write_text(json.dumps(state))
    code, _, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--continue")
    assert code == 2 and "cannot be continued" in err and "`sglpatch rebase --abort --sglang " in err
    code, out, err = rebase(sglpatch, chain, conflicting_series, tmp_path, "--abort")
    assert code == 0 and "rebase aborted: back on work" in out, err
    assert Git(chain).current_branch() == "work"


def test_revert_steps_back_one_rebase_at_a_time(sglpatch, chain, patches, tmp_path):
    """A finished rebase records its branch like apply: revert returns to where the rebase began, then further."""
    git = Git(chain)
    work = git.run("rev-parse", "HEAD")
    assert sglpatch("apply", "--sglang", chain, "--patches", patches)[0] == 0
    applied = git.run("rev-parse", "HEAD")
    assert rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.15")[0] == 0
    assert git.current_branch() == "sglpatch/v0.5.15"
    code, out, err = sglpatch("recover", "--sglang", chain)
    assert code == 0 and "nothing to recover" in out and "fully patched" in out, err
    assert sglpatch("revert", "--sglang", chain)[0] == 0
    assert git.current_branch() == "sglpatch/v0.5.14" and git.run("rev-parse", "HEAD") == applied
    assert git.rev_parse("refs/heads/sglpatch/v0.5.15") is None
    assert sglpatch("revert", "--sglang", chain)[0] == 0
    assert git.current_branch() == "work" and git.run("rev-parse", "HEAD") == work
    assert not (git.git_dir() / "sglpatch-state.json").exists()


def test_upstream_by_pr_number_is_reported_and_dropped_only_on_request(sglpatch, chain, patches, tmp_path):
    git = Git(chain)
    git.run("checkout", "-q", "-b", "upstream", "v0.5.15")
    (chain / "python/sglang/NOTES.md").write_text("upstream work\n")
    git.run("add", "-A")
    git.run("commit", "-qm", "[Spec] FutureMap seed relay (#29787)")
    git.run("checkout", "-q", "work")
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "upstream", "--release", "0.5.15")
    assert code == 0, err
    assert "upstream PR #29787" in out and "kept" in out
    assert git.run("rev-list", "--count", "upstream..HEAD") == "2"
    git.run("checkout", "-q", "work")
    code, out, err = rebase(
        sglpatch, chain, patches, tmp_path, "--onto", "upstream", "--release", "0.5.15", "--drop-upstreamed"
    )
    assert code == 0, err
    assert "dropped" in out and git.run("rev-list", "--count", "upstream..HEAD") == "1"
    assert len(load_series(patches).patches) == 1


def test_upstream_by_content_reverse_applies(sglpatch, chain, patches, tmp_path):
    git = Git(chain)
    first = load_series(patches).patches[0]
    git.run("checkout", "-q", "-b", "took-it", "v0.5.14")
    git.run("apply", "--index", str(first.path))
    git.run("commit", "-qm", "upstream takes the first patch verbatim")
    git.run("checkout", "-q", "work")
    code, out, err = rebase(
        sglpatch, chain, patches, tmp_path, "--onto", "took-it", "--release", "0.5.14", "--drop-upstreamed"
    )
    assert code == 0, err
    assert "reverse-applies" in out and "dropped" in out
    assert [p.name for p in load_series(patches).patches] == [
        "0001-Spec-Mark-the-global-config-for-the-test-series.patch"
    ]


def test_upstream_by_declared_marker(sglpatch, chain, tmp_path, base_repo, project_pin):
    message = (
        "[Spec] Our own seed flag\n\nWhy: marker test.\n\nUpstream-PR: 29787\n"
        f"Upstream-Marker: seed_dsa_topk_from_draft_extend in {SPEC_DIR}\n"
    )
    edit = (SECOND, "class GlobalConfig", "# our seed relay\nclass GlobalConfig")
    patches = one_patch_series(base_repo, project_pin, tmp_path / "marked", message, edit)
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.15", "--drop-upstreamed")
    assert code == 0, err
    assert "marker 'seed_dsa_topk_from_draft_extend' found" in out
    assert "every patch is upstream" in out


def test_a_prefix_that_does_not_compile_stops_naming_the_patch(sglpatch, chain, tmp_path, base_repo, project_pin):
    message = "[Spec] Break the syntax\n\nWhy: check test.\n\nUpstream-PR: 1\n"
    patches = one_patch_series(base_repo, project_pin, tmp_path / "broken", message, BROKEN_SYNTAX)
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")
    assert code == 1 and "does not compile" in err and "0001-Spec-Break-the-syntax.patch" in err
    assert rebase(sglpatch, chain, patches, tmp_path, "--abort")[0] == 0
    assert Git(chain).current_branch() == "work"


def test_rebase_refuses_a_dirty_checkout_and_unknown_refs(sglpatch, chain, patches, tmp_path):
    (chain / SECOND).write_text("dirty\n")
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.15")
    assert code == 2 and "uncommitted changes" in err
    Git(chain).run("checkout", "--", SECOND)
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "no-such-ref")
    assert code == 2 and "neither a commit" in err
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--continue")
    assert code == 2 and "no rebase in progress" in err


def test_check_imports_passes_a_series_whose_modules_import(sglpatch, chain, patches, tmp_path):
    # The CPU test environment holds 0.5.14's import-time dependencies (0.5.16 adds xgrammar, say),
    # so the passing case replays the series onto its own release.
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.14", "--check-imports")
    assert code == 0, err
    assert "importing the modules 0001-" in err and "importing the modules 0002-" in err


def test_check_imports_stops_at_the_patch_whose_module_fails_to_import(
    sglpatch, chain, tmp_path, base_repo, project_pin
):
    message = "[Spec] Import what is not there\n\nWhy: check test.\n\nUpstream-PR: 1\n"
    edit = (SECOND, "class GlobalConfig:", "import sglpatch_no_such_module\n\n\nclass GlobalConfig:")
    patches = one_patch_series(base_repo, project_pin, tmp_path / "unimportable", message, edit)
    code, _, err = rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16", "--check-imports")
    assert code == 1 and "0001-Spec-Import-what-is-not-there.patch" in err
    assert "sglpatch_no_such_module" in err and "sglang.global_config" in err
    assert rebase(sglpatch, chain, patches, tmp_path, "--abort")[0] == 0


def test_a_lines_rebase_writes_the_line_for_the_new_base_and_leaves_its_own(
    sglpatch, chain, series_dir, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    source = project / "patches" / "v0.5.14"
    shutil.copytree(series_dir, source)
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", project)
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    code, out, err = sglpatch("rebase", "--sglang", chain, "--onto", "v0.5.16", "--report-dir", tmp_path / "report")
    assert code == 0, err
    new_line = project / "patches" / "v0.5.16"
    assert f"wrote the line {new_line} against sglang 0.5.16" in out
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before
    assert json.loads((new_line / "pin.json").read_text())["sglang"]["tag"] == "v0.5.16"
    assert [p.name.split("-")[0] for p in load_series(new_line).patches] == ["0001", "0002"]
    assert not (new_line / ".sglpatch-rewriting").exists()
    code, out, _ = sglpatch("lines")
    assert "v0.5.14 (default): 2 patches" in out and "v0.5.16: 2 patches" in out
    # a second rebase onto the same release would overwrite that line: refused before anything moves
    assert sglpatch("revert", "--sglang", chain)[0] == 0
    head = Git(chain).run("rev-parse", "HEAD")
    code, _, err = sglpatch("rebase", "--sglang", chain, "--onto", "v0.5.16", "--line", "v0.5.14")
    assert code == 2 and "v0.5.16 already holds a series line" in err and "nothing was changed" in err
    assert Git(chain).run("rev-parse", "HEAD") == head and Git(chain).current_branch() == "work"


@pytest.fixture
def project_series(tmp_path):
    """A private copy of the project's own series (a rebase that finishes rewrites it)."""
    dest = tmp_path / "project-series"
    shutil.copytree(default_patch_dir(), dest)
    return dest


def picture_lines(out):
    return [line.strip() for line in out.splitlines() if line.startswith("  ") and ".patch: " in line]


def test_the_whole_picture_comes_before_the_stop_and_is_drifts(sglpatch, checkout, project_series, tmp_path):
    """0.5.15 from v0.5.14: every patch's state is printed before the rebase stops at the first conflict,
    and it is exactly what drift says for the same base and release (one replay engine)."""
    code, out, err = rebase(sglpatch, checkout, project_series, tmp_path, "--onto", "0.5.15")
    assert code == 1 and "0001-" in err and "conflicts in" in err
    printed = picture_lines(out)
    code, _, err = sglpatch("drift", "--patches", project_series, "--releases", "0.5.15", "--out", tmp_path / "drift")
    assert code == 0, err
    cells = json.loads((tmp_path / "drift" / "drift.json").read_text())["releases"]["0.5.15"]
    assert printed == [
        f"{name}: {c['outcome']}" + (f" ({c['detail']})" if c["detail"] else "") for name, c in cells.items()
    ]
    kinds = [line.split(": ")[1].split(" ")[0] for line in printed]
    assert kinds[:4] == ["conflict", "conflict", "upstream", "upstream"]  # patches 3-4 are #29787, in 0.5.15
    assert rebase(sglpatch, checkout, project_series, tmp_path, "--abort")[0] == 0


def commit_upstream(git, chain, subjects):
    """Commits with these subjects on a branch `upstream` off v0.5.14 (each edits a notes file only)."""
    git.run("checkout", "-q", "-b", "upstream", "v0.5.14")
    for number, subject in enumerate(subjects):
        (chain / "python/sglang/NOTES.md").write_text(f"upstream work {number}\n")
        git.run("add", "-A")
        git.run("commit", "-qm", subject)
    git.run("checkout", "-q", "work")


def rebase_past_landed_and_reverted(sglpatch, chain, series, tmp_path, landed: str, revert_pr: int):
    """Upstream lands the PR `landed` names, then reverts it (PR #`revert_pr`); rebase `series` onto that
    with --drop-upstreamed."""
    commit_upstream(Git(chain), chain, [landed, f'Revert "{landed}" (#{revert_pr})'])
    args = ("--onto", "upstream", "--release", "0.5.14", "--drop-upstreamed")
    return rebase(sglpatch, chain, series, tmp_path, *args)


def test_extends_pr_never_marks_a_patch_upstream_nor_does_a_revert(sglpatch, chain, project_series, tmp_path):
    """Patches 1-2 extend #27166: neither its landing nor a revert naming it makes them upstream."""
    git = Git(chain)
    landed = "[DSA] DeepGEMM-native target_verify on SM100 (#27166)"
    code, out, err = rebase_past_landed_and_reverted(sglpatch, chain, project_series, tmp_path, landed, 30500)
    assert code == 0, err
    assert "upstream" not in " ".join(picture_lines(out)) and "dropped" not in out
    series = load_series(project_series).patches
    assert git.run("rev-list", "--count", "upstream..HEAD") == str(len(series))
    assert [p.trailer("extends-pr") for p in series[:2]] == ["27166", "27166"]


def test_a_reverted_upstream_pr_is_not_upstream(sglpatch, chain, patches, tmp_path):
    """The second test patch carries #29787 (Upstream-PR): landed, then reverted, it is not upstream."""
    git = Git(chain)
    code, out, err = rebase_past_landed_and_reverted(
        sglpatch, chain, patches, tmp_path, "[Spec] FutureMap seed relay (#29787)", 30501
    )
    assert code == 0, err
    assert "upstream PR" not in out and git.run("rev-list", "--count", "upstream..HEAD") == "2"


@pytest.fixture(scope="module")
def three_patch_template(tmp_path_factory, base_repo, project_pin, release_chain):
    """Patches 1 and 2 edit lines upstream rewrote in 0.5.15 (each conflicts), patch 3 a file it kept."""
    tmp = tmp_path_factory.mktemp("three")
    first, second = changed_line(release_chain, OVERLAP), changed_line(release_chain, BACKEND)
    return make_series(
        base_repo,
        tmp / "dev",
        tmp / "three",
        project_pin,
        [
            ("[Spec] Touch the overlap line\n\nWhy: to conflict.\n", [(OVERLAP, first, first + "  # ours")]),
            ("[DSA] Touch the backend line\n\nWhy: to conflict.\n", [(BACKEND, second, second + "  # ours too")]),
            (
                "[Spec] Mark the global config\n\nWhy: lands clean.\n",
                [(SECOND, "class GlobalConfig", "# kept\nclass GlobalConfig")],
            ),
        ],
    )


@pytest.fixture
def three_patches(tmp_path, three_patch_template):
    return own_copy(three_patch_template, tmp_path)


def test_drop_mid_rebase_keeps_earlier_resolutions_and_the_series_omits_it(sglpatch, chain, three_patches, tmp_path):
    names = [p.name for p in load_series(three_patches).patches]
    git = Git(chain)
    code, _, err = rebase(sglpatch, chain, three_patches, tmp_path, "--onto", "v0.5.15")
    assert code == 1 and names[0] in err and "`sglpatch rebase --drop 1 --sglang " in err
    git.run("checkout", "--theirs", "--", OVERLAP)  # the hand resolution of patch 1
    git.run("add", OVERLAP)
    code, _, err = rebase(sglpatch, chain, three_patches, tmp_path, "--continue")
    assert code == 1 and f"{names[1]} conflicts" in err and "`sglpatch rebase --drop 2 --sglang " in err
    code, out, err = rebase(sglpatch, chain, three_patches, tmp_path, "--drop", "2")
    assert code == 0, err
    assert f"{names[1]}: dropped (left out by hand" in out and f"series omits it: {names[1]}" in out
    assert git.current_branch() == "sglpatch/v0.5.15" and git.run("rev-list", "--count", "v0.5.15..HEAD") == "2"
    assert "  # ours" in (chain / OVERLAP).read_text() and "# ours too" not in (chain / BACKEND).read_text()
    assert [p.subject for p in load_series(three_patches).patches] == [
        "[Spec] Touch the overlap line",
        "[Spec] Mark the global config",
    ]
    report = (tmp_path / "report" / "range-diff-v0.5.14-to-v0.5.15.txt").read_text()
    assert f"# {names[1]}: dropped" in report


def test_drop_a_later_patch_by_name_while_stopped_and_refuse_an_earlier_one(sglpatch, chain, three_patches, tmp_path):
    names = [p.name for p in load_series(three_patches).patches]
    git = Git(chain)
    assert rebase(sglpatch, chain, three_patches, tmp_path, "--onto", "v0.5.15")[0] == 1
    code, out, err = rebase(sglpatch, chain, three_patches, tmp_path, "--drop", names[2].removesuffix(".patch"))
    assert code == 0 and f"will leave out {names[2]}" in out and f"stopped at {names[0]}" in out, err
    assert "<<<<<<<" in (chain / OVERLAP).read_text()  # still stopped, the conflict as it was
    git.run("checkout", "--theirs", "--", OVERLAP)
    git.run("add", OVERLAP)
    assert rebase(sglpatch, chain, three_patches, tmp_path, "--continue")[0] == 1  # patch 2 conflicts
    before = fingerprint(chain)
    code, _, err = rebase(sglpatch, chain, three_patches, tmp_path, "--drop", "1")
    assert code == 2 and f"{names[0]} is already rebased" in err and "`sglpatch rebase --abort --sglang " in err
    code, _, err = rebase(sglpatch, chain, three_patches, tmp_path, "--drop", "7")
    assert code == 2 and "names no patch" in err
    assert fingerprint(chain) == before
    git.run("checkout", "--theirs", "--", BACKEND)
    git.run("add", BACKEND)
    code, out, err = rebase(sglpatch, chain, three_patches, tmp_path, "--continue")
    assert code == 0 and f"{names[2]}: dropped" in out, err
    assert git.run("rev-list", "--count", "v0.5.15..HEAD") == "2" and len(load_series(three_patches).patches) == 2


def test_drop_the_patch_whose_prefix_does_not_compile(sglpatch, chain, tmp_path, base_repo, project_pin):
    """A failing check stops after the pick: dropping that patch takes its commit out again and goes on."""
    message = "[Spec] Break the syntax\n\nWhy: check test.\n"
    patches = one_patch_series(base_repo, project_pin, tmp_path / "broken", message, BROKEN_SYNTAX)
    assert rebase(sglpatch, chain, patches, tmp_path, "--onto", "v0.5.16")[0] == 1
    code, out, err = rebase(sglpatch, chain, patches, tmp_path, "--drop", "0001")
    assert code == 0 and "0 of 1 patches kept" in out and "no patch is left on 0.5.16" in out, err
    git = Git(chain)
    assert git.run("rev-parse", "HEAD") == git.run("rev-parse", "v0.5.16^{commit}")


def test_the_state_file_loads_and_saves_back_byte_for_byte(sglpatch, chain, three_patches, tmp_path):
    """One type for state.json: what a stopped rebase wrote loads as a RebaseState and saves back unchanged."""
    from sglpatch.targets import rebase_store

    assert rebase(sglpatch, chain, three_patches, tmp_path, "--onto", "v0.5.15", "--drop", "3")[0] == 1
    folder = rebase_store.state_dir(Git(chain))
    written = (folder / "state.json").read_bytes()
    state = rebase_store.load(folder)
    assert state.stopped.kind == rebase_store.StopKind.CONFLICT and state.next == 0 and state.unfit is None
    assert state.dropped == [load_series(three_patches).patches[2].name]
    rebase_store.save(folder, state)
    assert (folder / "state.json").read_bytes() == written
