"""The hostile trial of round 9: the advice the toolkit prints followed literally, the files its other commands
write outside a target, and what round 8 left untried (docs/reliability.md, round 9).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testing.tree_bytes import tree_state

ROOT = Path(__file__).resolve().parents[2]


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
