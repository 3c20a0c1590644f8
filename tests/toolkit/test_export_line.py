"""`export --line L`: the line's folder and tag, so `make export FROM=REPO LINE=v0.5.23` needs no BASE."""

from __future__ import annotations

import shutil
import subprocess

from sglpatch.series import load_series


def test_line_gives_the_base_tag(sglpatch, tmp_path, series_dir):
    dev = tmp_path / "dev"
    source = series_dir.parent / "dev"  # the repo the test series was exported from
    subprocess.run(["git", "clone", "-q", str(source), str(dev)], check=True)
    out = tmp_path / "patches"
    shutil.copytree(series_dir, out)
    for patch in out.glob("*.patch"):
        patch.unlink()
    code, stdout, err = sglpatch("export", "--from", dev, "--line", "v0.5.14", "--patches", out)
    assert code == 0, err
    assert "wrote 2 patches" in stdout
    assert [p.name for p in load_series(out).patches] == [p.name for p in load_series(series_dir).patches]


def test_export_without_base_or_line_is_refused(sglpatch, tmp_path, series_dir):
    code, _, err = sglpatch("export", "--from", series_dir.parent / "dev", "--patches", tmp_path / "p")
    assert code == 2 and "needs --base" in err
