"""The hostile trial of round 10: the code changed after round 9 (pr's guard over its bodies, recover's advice that
keeps copies, the Makefile's check of a PYTEST_TMP named on the command line), tried as a user would meet it
(docs/reliability.md, round 10).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testing.tree_bytes import tree_state

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
# stands in for sglpatch (the one line besides the default, as `sglpatch lines --test-folders` prints it)
FAKE_SGLPATCH = """#!/bin/sh
echo "sglpatch $*" >> "$(dirname "$0")/../calls"
[ "$1 $2" = "lines --test-folders" ] && echo "v0.5.23 tests/patched_v0_5_23"
exit 0
"""
# stands in for the venv's python: `-m pytest --basetemp=DIR` empties DIR as pytest does, and marks it as conftest
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$(dirname "$0")/../calls"
for a in "$@"; do case "$a" in --basetemp=*) t="${a#--basetemp=}"; rm -rf "$t"; mkdir -p "$t" && : > "$t/.sglpatch-pytest";; esac; done
exit 0
"""


def fake_project(tmp_path: Path) -> Path:
    """This Makefile in a folder of its own, its venv's sglpatch and python stand-ins that say what they were run
    with: make test runs its recipes, and nothing here or in /work is touched."""
    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", project)
    for name, text in (("sglpatch", FAKE_SGLPATCH), ("python", FAKE_PYTHON)):
        (project / ".venv" / "bin" / name).write_text(text)
        (project / ".venv" / "bin" / name).chmod(0o755)
    return project


def make(project: Path, *args: str) -> subprocess.CompletedProcess:
    if MAKE is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(project), "-o", ".venv/.sglang-cpu-stamp", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_test_leaves_a_folder_of_the_users_named_like_a_lines_trees_alone(tmp_path):
    """`make test PYTEST_TMP=/data/sglang` hands each line's own tests `--basetemp=/data/sglang-<line>`, which
    pytest empties first: a folder of the user's of that name (their checkout of sglang v0.5.23 beside the new
    folder they named) was deleted after the main suite, exit 0; only PYTEST_TMP itself was looked at. Now each
    such folder that holds files and no mark of a test run is refused before anything runs."""
    project = fake_project(tmp_path)
    theirs = tmp_path / "data" / "sglang-v0.5.23"
    theirs.mkdir(parents=True)
    (theirs / "notes.md").write_text("my checkout's notes\n")
    before = tree_state(theirs)
    run = make(project, "test", f"PYTEST_TMP={tmp_path / 'data' / 'sglang'}")
    assert run.returncode == 2 and "holds files no test run made" in run.stderr, run.stdout + run.stderr
    assert str(theirs) in run.stderr and run.stderr.count("make: ") == 1 + run.stderr.count("make: ***")
    assert tree_state(theirs) == before
    assert "pytest" not in (project / ".venv" / "calls").read_text() and "apply" not in run.stdout


def test_make_test_takes_a_pytest_tmp_with_a_dollar_as_text(tmp_path):
    """The Makefile takes every value as written (a `$(...)` in it is text make never runs). `make test` printed
    PYTEST_TMP inside double quotes, so the shell ran a `$(...)` in it (and the refusal of a folder of the user's
    did too): `PYTEST_TMP='out$(touch RAN)'` ran `touch RAN`. Now it goes to the shell single-quoted."""
    project = fake_project(tmp_path)
    mine = project / "out$(touch RAN)"
    mine.mkdir()
    (mine / "f").write_text("mine\n")
    run = make(project, "test", "PYTEST_TMP=out$(touch RAN)")
    assert run.returncode == 2 and "out$(touch RAN)" in run.stderr, run.stdout + run.stderr
    (mine / "f").unlink()  # empty: the run goes on, and says where its trees are
    run = make(project, "test", "PYTEST_TMP=out$(touch RAN)")
    assert run.returncode == 0 and "its trees under out$(touch RAN) (README" in run.stdout, run.stdout + run.stderr
    assert not (project / "RAN").exists()


def test_an_edit_in_a_file_whose_name_git_quotes_stops_the_roll_back_of_a_killed_rebase(tmp_path):
    """A rebase killed inside its git (the lock it held left), then an edit in a file whose name git quotes
    (`café.py`, a quote or a newline in it), then `recover`. The check that only the killed git's own writes are
    there read `git diff --name-only HEAD`, which names that file `"caf\\303\\251.py"`, a path no file has: the
    edit was taken for no change, and the roll back (`git checkout -f`) threw it away; with no lock of the run's
    left, the refusal named the quoted path, and its advice kept no copy and put nothing back. Now the names are
    read as they are: refused, and the advice, followed as printed, keeps the edit beside the file."""
    from types import SimpleNamespace

    from sglpatch.errors import FatalError
    from sglpatch.git import init_repo
    from sglpatch.targets import checkout_at
    from sglpatch.targets.killed_git import _refuse_unexplained_changes
    from testing.sglang_trees import as_tester

    root = tmp_path / "my checkout"
    git = as_tester(init_repo(root))
    for name in ("café.py", 'say "hi".py'):
        (root / name).write_text("x = 1\n")
    git.run("add", "-A")
    git.run("commit", "-q", "-m", "mine")
    head = git.run("rev-parse", "HEAD")
    (root / "café.py").write_text("x = 2  # my edit\n")
    rebase = SimpleNamespace(phase="replaying", onto=head, original_head=head, commits=[], next=None)
    for locks in ((SimpleNamespace(ours=True),), ()):  # killed inside its git, or between two of its steps
        state = SimpleNamespace(target=checkout_at(root), rebase=rebase, locks=locks)
        with pytest.raises(FatalError) as refusal:
            _refuse_unexplained_changes(state)
        assert "café.py" in str(refusal.value) and "\\303" not in str(refusal.value)
    keep, put_back = re.findall(r"`([^`]+)`", str(refusal.value))[:2]
    subprocess.run(["bash", "-c", f"{keep} && {put_back}"], check=True, cwd=tmp_path)
    assert (root / "café.py.mine").read_text() == "x = 2  # my edit\n" and (root / "café.py").read_text() == "x = 1\n"


def test_recovers_advice_keeps_a_copy_beside_a_file_mine_of_the_users(tmp_path):
    """The advice before `git checkout -- FILES` keeps a copy of each as FILE.mine under `set -C`: where the user
    has a FILE.mine already (their own copy from before), the copy was refused ("cannot overwrite existing file"),
    and with it the advice: followed step by step, the put back after the failed copy threw the edit away. Now each copy goes to a name not yet
    taken (FILE.mine-2), and FILE.mine stays as it was."""
    from sglpatch import hints
    from sglpatch.git import init_repo
    from testing.sglang_trees import as_tester

    root = tmp_path / "checkout"
    git = as_tester(init_repo(root))
    (root / "-x y.py").write_text("x = 1\n")
    git.run("add", "-A")
    git.run("commit", "-q", "-m", "mine")
    (root / "-x y.py").write_text("x = 2  # my edit\n")
    (root / "-x y.py.mine").write_text("an older copy of mine\n")
    keep, put_back = re.findall(r"`([^`]+)`", hints.put_back_keeping_copies(root, ["-x y.py"]))
    subprocess.run(["bash", "-c", f"{keep} && {put_back}"], check=True, cwd=tmp_path, capture_output=True)
    assert (root / "-x y.py.mine").read_text() == "an older copy of mine\n"
    assert (root / "-x y.py.mine-2").read_text() == "x = 2  # my edit\n" and (root / "-x y.py").read_text() == "x = 1\n"
