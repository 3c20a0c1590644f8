"""The hostile trial of round 9: the advice the toolkit prints followed literally, the files its other commands
write outside a target, and what round 8 left untried (docs/reliability.md, round 9).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sglpatch.git import Git
from testing.sglang_trees import stopped_at_a_conflict
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
