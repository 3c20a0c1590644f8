"""The hostile trial of round 9: the advice the toolkit prints followed literally, the files its other commands
write outside a target, and what round 8 left untried (docs/reliability.md, round 9).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from sglpatch.git import Git
from testing.killed_cli import clean_cut_short
from testing.sglang_trees import as_tester, stopped_at_a_conflict
from testing.tree_bytes import refused, tree_state

ROOT = Path(__file__).resolve().parents[2]
BINARY = "python/sglang/srt/grpc/_core.cpython-311-x86_64-linux-gnu.so"  # a compiled module sglang tracks


def test_gpu_leg_writes_its_summary_at_the_stem_given_even_with_a_dot_in_it(tmp_path):
    """Before: the summary and junit went to `STEM.with_suffix(...)`, which replaces whatever follows a dot in the
    stem's name: `--out out/h100.run2` wrote `out/h100.json` and `out/h100.xml`, over a file of the user's (or an
    earlier run's summary) of that name, and said so; the CI workflow then found no `$LEG_OUT.json`. Now the files
    are STEM.json and STEM.xml, as `--out` says."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    out = tmp_path / "out"
    out.mkdir()
    (out / "h100.json").write_text('{"my": "first run"}\n')
    (out / "h100.xml").write_text("<mine/>\n")
    before = tree_state(out)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts")}  # this checkout's sglpatch, whatever the venv's is
    run = subprocess.run(
        [sys.executable, "-m", "sglpatch", "gpu-leg", "--leg", "h100", "--sglang", str(package)]
        + ["--python", getattr(sys, "_base_executable", sys.executable), "--out", str(out / "h100.run2")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # the series does not apply to an empty package
    after = tree_state(out)
    assert {k: v for k, v in after.items() if k in before} == before
    assert (out / "h100.run2.json").is_file() and (out / "h100.run2.xml").is_file()
    assert f"-> {out / 'h100.run2.json'}, {out / 'h100.run2.xml'}" in run.stdout


def test_the_advice_to_save_an_edit_beside_a_stopped_rebase_keeps_a_binary_file(sglpatch, checkout, patches, tmp_path):
    """While a rebase waits at a conflict the user rebuilds a compiled module sglang tracks (its `.so`). --abort
    refuses and says how to save the edit; before, it said `git diff HEAD -- FILE > my-changes.patch`, which writes
    "Binary files ... differ" and not the bytes, then `git checkout HEAD -- FILE`: the rebuilt module was gone,
    the saved patch empty of it. Now the saved patch holds it (`--binary`) and applies back."""
    stopped_at_a_conflict(sglpatch, checkout, patches, tmp_path / "report")
    mine = os.urandom(4096) + b"\0my build\n"
    (checkout / BINARY).write_bytes(mine)
    err = refused(sglpatch, checkout, "--sglang", checkout, "--abort", command="rebase")
    save, put_back = re.findall(r"`([^`]+)`", err)[:2]
    saved = tmp_path / "saved"
    saved.mkdir()
    assert subprocess.run(["bash", "-c", f"{save} && {put_back}"], cwd=saved).returncode == 0
    assert (checkout / BINARY).read_bytes() != mine
    code, out, err = sglpatch("rebase", "--sglang", checkout, "--abort")
    assert code == 0, err
    Git(checkout).run("apply", str(saved / "my-changes.patch"))
    assert (checkout / BINARY).read_bytes() == mine


def test_clean_cut_short_then_run_again_keeps_a_commit_made_in_the_folder_it_left(sglpatch, series_project):
    """A clean killed after it looked at build/ and renamed it to build.deleting, before it deleted: a shell still in
    build/sglang is in build.deleting/sglang, and the user commits there. Then `make apply` (a new build/sglang) and
    `make clean`: before, build.deleting went first without a look ("its checkouts were looked at then"), the commit
    with it. Now a file changed since that look is refused, with the `mv -n` that keeps the folder."""
    assert sglpatch("apply")[0] == 0

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt  # stands in for the kill: nothing deleted past the rename

    clean_cut_short(sglpatch, killed)
    left = series_project / "build.deleting" / "sglang"
    assert (left / ".git").is_dir() and not (series_project / "build").exists()
    mine = as_tester(Git(left))
    (left / "NOTES.md").write_text("my notes\n")
    mine.run("add", "NOTES.md")
    mine.run("commit", "-q", "-m", "My notes")
    before = tree_state(series_project / "build.deleting")
    assert sglpatch("apply")[0] == 0
    code, out, err = sglpatch("clean")
    assert code == 2 and err.count("\n") == 1 and "nothing was deleted" in err, (out, err)
    assert tree_state(series_project / "build.deleting") == before
    move = re.findall(r"`(mv -n [^`]+)`", err)[0]
    subprocess.run(move, shell=True, check=True, cwd=series_project.parent)
    assert sglpatch("clean")[0] == 0 and not (series_project / "build").exists()
    kept = series_project.parent / "project-build.deleting-mine" / "sglang"
    assert Git(kept).run("log", "-1", "--format=%s") == "My notes"


def test_clean_cut_short_with_nothing_changed_since_is_finished_by_the_next(sglpatch, series_project):
    """The guard above leaves a clean cut short to the next one when nothing changed since its look, however far
    its delete had gone (one folder at a time, the mark of the look last)."""
    from sglpatch.commands import clean

    for folder in ("pr", "drift"):
        (series_project / "build" / folder).mkdir(parents=True)
        (series_project / "build" / folder / "report.md").write_text("made by sglpatch\n")
    real_rmtree, calls = clean.shutil.rmtree, []

    def cut_after_one(path, *args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(path)
        real_rmtree(path, *args, **kwargs)

    clean_cut_short(sglpatch, cut_after_one)
    assert (series_project / "build.deleting").is_dir()
    code, out, err = sglpatch("clean")
    assert code == 0 and "left by a clean cut short" in out, err
    assert not (series_project / "build.deleting").exists()


def test_recovers_advice_for_an_edited_patched_package_keeps_the_edit_and_names_the_package(
    sglpatch, package, patches, tmp_path
):
    """A package folder the series is applied to, one of its patched files edited since (a debug line), then
    `recover`. Before: "`sglpatch revert --force` puts back the original bytes": followed as printed it reverted
    the default base, not this folder (no --sglang), and, pointed here, threw the edit away without a word. Now
    the advice first keeps a copy of each edited file beside it (never over a file of that name), and names the
    folder."""
    assert sglpatch("apply", "--sglang", package, "--patches", patches)[0] == 0
    edited = package / "global_config.py"
    edited.write_text(edited.read_text() + "print('my debug line')\n")
    mine = edited.read_bytes()
    err = refused(sglpatch, package, "--sglang", package, command="recover")
    commands = re.findall(r"`([^`]+)`", err)
    assert len(commands) == 2 and commands[1].startswith("sglpatch revert --force --sglang "), err
    assert subprocess.run(["bash", "-c", commands[0]], cwd=tmp_path).returncode == 0
    assert subprocess.run(["bash", "-c", commands[0]], cwd=tmp_path).returncode != 0  # a copy is never written over
    code, out, err = sglpatch(*shlex.split(commands[1])[1:])
    assert code == 0, err
    assert (package / "global_config.py.mine").read_bytes() == mine
