"""The hostile trial of issue 48 (round 4), on real v0.5.14 checkouts and package folders: what status, apply,
revert and recover say is true, a refusal is one line that changes nothing, and nothing of the user's is lost.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from sglpatch.git import Git
from testing.fault_harness import default_sigint
from testing.hostile import CAPSH
from testing.sglang_trees import as_tester
from testing.tree_bytes import refused, tree_state


def commit_of_my_own(checkout, name: str = "my_notes.py") -> str:
    git = as_tester(Git(checkout))
    (checkout / "python/sglang" / name).write_text("MINE = 1\n")
    git.run("add", f"python/sglang/{name}")
    git.run("commit", "-q", "-m", f"My own commit ({name})")
    return git.run("rev-parse", "HEAD")


# -- E: recover with a commit of the user's on top of the series --------------------------------


def test_recover_says_head_is_on_the_series_branch_with_commits_of_your_own(sglpatch, checkout, patches):
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    commit_of_my_own(checkout)
    code, out, err = sglpatch("recover", "--sglang", checkout)
    assert code == 0, err
    assert "which" in out and "is on, HEAD 1 commit of your own past its last commit" in out, out
    assert "not on" not in out


# -- G: a branch of the user's where the series branch goes -----------------------------------------


@pytest.mark.parametrize("mine", ["sglpatch/v0.5.14", "sglpatch", "sglpatch/v0.5.14/wip"])
def test_a_branch_of_yours_in_the_series_branchs_place_is_named_by_status_and_apply(sglpatch, checkout, patches, mine):
    """status said "applies 2 patch-s" (sic) and apply refused with "or delete it" (your branch), or failed inside
    `git fetch` with its command line (a branch `sglpatch`)."""
    Git(checkout).run("branch", mine)
    code, out, err = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert code == 0, err
    last = out.splitlines()[-1]
    assert last.startswith("apply:  refuses: branch sglpatch/v0.5.14 ") and mine in last, out
    err = refused(sglpatch, checkout, "--sglang", checkout, "--patches", patches)
    assert "branch sglpatch/v0.5.14 " in err and mine in err and "--branch NAME" in err, err
    assert "delete" not in err and "git fetch" not in err, err
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches, "--branch", "series")[0] == 0


def test_a_branch_a_linked_worktree_holds_is_named(sglpatch, checkout, patches, tmp_path):
    Git(checkout).run("worktree", "add", "-q", "-b", "sglpatch/v0.5.14", str(tmp_path / "elsewhere"))
    err = refused(sglpatch, checkout, "--sglang", checkout, "--patches", patches)
    assert "branch sglpatch/v0.5.14 already exists" in err, err


def test_counts_say_patches_not_patchs(sglpatch, checkout, patches):
    """Issue 48 R."""
    code, out, err = sglpatch("status", "--sglang", checkout, "--patches", patches)
    assert out.splitlines()[-1] == "apply:  applies 2 patches", out


# -- H: the package folder of a checkout (an editable install) ---------------------------------------


@pytest.mark.parametrize("given", ["python/sglang", "python"])
def test_the_package_folder_of_a_checkout_is_refused_naming_the_checkout(sglpatch, checkout, patches, given):
    """apply wrote 15 tracked files behind git and left python/sglang/.sglpatch/ in the repository."""
    for command in ("apply", "status"):
        err = refused(sglpatch, checkout, "--sglang", checkout / given, "--patches", patches, command=command)
        assert f"tracked by the git checkout {checkout}" in err and f"--sglang {checkout}" in err, err
    assert not (checkout / "python/sglang/.sglpatch").exists()
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0


# -- J: git branch -D failing in a revert -----------------------------------------------------------


def test_a_series_branch_a_linked_worktree_holds_too_is_named_before_the_revert_changes_anything(
    sglpatch, checkout, patches, tmp_path
):
    """revert and recover ended in `AttributeError: 'GitFailed' object has no attribute 'filename'`, the
    checkout left "reverting" until the worktree moved."""
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    elsewhere = tmp_path / "elsewhere"
    Git(checkout).run("worktree", "add", "-q", "--force", str(elsewhere), "sglpatch/v0.5.14")
    err = refused(sglpatch, checkout, "--sglang", checkout, command="revert")
    assert f"checked out in the worktree {elsewhere}" in err and "switch --detach" in err, err
    Git(elsewhere).run("switch", "-q", "--detach")
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err


REFUSING_HOOK = """#!/bin/sh
[ "$1" = prepared ] || exit 0
while read -r old new ref; do
  case "$new $ref" in *0000000000\\ refs/heads/sglpatch/*) echo "the branch stays" >&2; exit 1;; esac
done
exit 0
"""


def test_a_reference_transaction_hook_refusing_the_branch_deletion_is_one_line_and_recover_finishes(
    sglpatch, checkout, patches
):
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    hook = checkout / ".git" / "hooks" / "reference-transaction"
    hook.write_text(REFUSING_HOOK)
    hook.chmod(0o755)
    for command in ("revert", "recover"):
        code, out, err = sglpatch(command, "--sglang", checkout)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "branch -q -D sglpatch/v0.5.14` failed" in err and "the revert stopped part-way" in err, err
    hook.unlink()
    code, out, err = sglpatch("recover", "--sglang", checkout)
    assert code == 0 and "is as it was" in out, (out, err)
    assert Git(checkout).rev_parse("refs/heads/sglpatch/v0.5.14") is None


# -- M: an unborn branch ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["apply", "status", "rebase"])
def test_an_unborn_branch_is_refused_in_sglpatch_words(sglpatch, checkout, patches, command):
    """`git checkout --orphan` (or a `git init` never committed): "`git -C T rev-parse 'HEAD^{tree}'` failed"."""
    Git(checkout).run("checkout", "-q", "--orphan", "fresh")
    args = ["--sglang", checkout, "--patches", patches] + (["--onto", "v0.5.14"] if command == "rebase" else [])
    err = refused(sglpatch, checkout, *args, command=command)
    assert "no commit yet" in err and "fresh" in err and "rev-parse" not in err, err


# -- N: Ctrl-C while Python imports the toolkit --------------------------------------------------


def test_ctrl_c_while_the_toolkit_is_imported_is_one_line(tmp_path):
    """A Ctrl-C in the first 0.15 s (Python importing) printed a KeyboardInterrupt traceback. The script below
    is the console script with the interrupt landing between the package's import and the CLI's."""
    script = tmp_path / "sglpatch"
    script.write_text(
        "import os, signal, sys\nimport sglpatch\nos.kill(os.getpid(), signal.SIGINT)\n"
        "from sglpatch.cli import main\nsys.exit(main())\n"
    )
    # SIGINT at its default, as at a terminal: a child of a shell's background job starts with it ignored
    result = subprocess.run(
        [sys.executable, str(script), "lines"], capture_output=True, text=True, timeout=60, preexec_fn=default_sigint
    )
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == "sglpatch: interrupted by SIGINT while starting; nothing was changed\n"
    started = subprocess.run([sys.executable, "-m", "sglpatch", "lines"], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr


# -- O: a HOME sglpatch cannot write -------------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "apply", "recover"])
def test_a_read_only_home_is_one_line_naming_sglpatch_cache(checkout, patches, tmp_path, command):
    """Every command failed on the lock folder under ~/.cache/sglpatch, recover advised running recover, and
    nothing named SGLPATCH_CACHE."""
    if os.geteuid() == 0 and CAPSH is None:
        pytest.skip("running as root without capsh: cannot drop CAP_DAC_OVERRIDE to make modes bite")
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    (home / ".cache").chmod(0o555)
    env = {k: v for k, v in os.environ.items() if k not in ("SGLPATCH_CACHE", "XDG_CACHE_HOME")} | {"HOME": str(home)}
    args = [sys.executable, "-m", "sglpatch", command, "--sglang", str(checkout)]
    args += ["--patches", str(patches)] if command != "recover" else []
    if os.geteuid() == 0:
        args = [CAPSH, "--drop=cap_dac_override", "--", "-c", 'exec "$0" "$@"', *args]
    before = tree_state(checkout)
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "SGLPATCH_CACHE" in result.stderr and "nothing was changed" in result.stderr, result.stderr
    assert "recover" not in result.stderr.split("error:", 1)[1], result.stderr
    assert tree_state(checkout) == before
    cache = tmp_path / "cache"
    result = subprocess.run(args, capture_output=True, text=True, env=env | {"SGLPATCH_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr


# -- P: a small `ulimit -f` ----------------------------------------------------------------------


def _small_file_limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_a_file_size_limit_is_named_and_nothing_is_changed(request, patches, kind):
    """With `ulimit -f` small, git died of SIGXFSZ: "`git ... read-tree ...` failed (-25)", without "file too
    large" or "nothing was changed"."""
    target = request.getfixturevalue(kind)
    before = tree_state(target)
    result = subprocess.run(
        [sys.executable, "-m", "sglpatch", "apply", "--sglang", str(target), "--patches", str(patches)],
        capture_output=True,
        text=True,
        preexec_fn=_small_file_limit,
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
        timeout=120,
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "ulimit -f" in result.stderr and "nothing was changed" in result.stderr, result.stderr
    assert "(-25)" not in result.stderr, result.stderr
    assert tree_state(target) == before
