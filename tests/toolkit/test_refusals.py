"""Every refusal: one line on stderr, exit code 2, the target unchanged byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sglpatch.git import Git
from sglpatch.series import SUMS_FILE, load_series, sha256_hex
from sglpatch.targets.target import open_target, target_lock
from testing.sglang_trees import BACKEND, SECOND, replace_in
from testing.tree_bytes import fingerprint


def refused(sglpatch, target, *args):
    before = fingerprint(target)
    code, out, err = sglpatch("apply", "--sglang", target, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert fingerprint(target) == before
    assert not list(target.rglob("*.rej"))
    return err


def rewrite_patch(patches, index, edit):
    """Damage one patch and record its new checksum, so the damage itself is what is caught."""
    names = [p.name for p in load_series(patches).patches]
    path = patches / names[index]
    path.write_bytes(edit(path.read_bytes()))
    sums = "".join(f"{sha256_hex((patches / n).read_bytes())}  {n}\n" for n in names)
    (patches / SUMS_FILE).write_text(sums)


def test_missing_target(sglpatch, tmp_path, patches):
    code, _, err = sglpatch("apply", "--sglang", tmp_path / "nowhere", "--patches", patches)
    assert code == 2 and "does not exist" in err


def test_not_sglang(sglpatch, tmp_path, patches):
    err = refused(sglpatch, tmp_path, "--patches", patches)
    assert "is not sglang" in err


def test_dirty_tracked_file(sglpatch, checkout, patches):
    (checkout / SECOND).write_text((checkout / SECOND).read_text() + "# wip\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert "uncommitted changes" in err and SECOND in err


def test_dirty_untracked_file_in_the_way(sglpatch, checkout, patches):
    from testing.sglang_trees import NEW_FILE

    (checkout / NEW_FILE).write_text("mine\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert NEW_FILE in err


def test_base_differs_from_pin_names_the_files(sglpatch, checkout, patches):
    replace_in(checkout / BACKEND, "import torch", "import torch  # drift")
    Git(checkout).run("commit", "-qam", "drift")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert "differs from the pin" in err and BACKEND in err


def test_conflict_names_patch_file_and_hunk(sglpatch, checkout, patches):
    replace_in(checkout / SECOND, "class GlobalConfig", "class OtherConfig")
    Git(checkout).run("commit", "-qam", "conflicting change")
    err = refused(sglpatch, checkout, "--patches", patches, "--3way")
    assert "0002-" in err and SECOND in err and "nothing was changed" in err
    # issue 36: the file by name, and what a 3-way merge found (not "(unknown file): U <path>")
    assert f"does not apply: {SECOND}: its 3-way merge conflicts with the changes there" in err, err
    assert "unknown file" not in err and f"U {SECOND}" not in err


def test_checksum_mismatch(sglpatch, checkout, patches):
    path = load_series(patches).patches[0].path
    path.write_bytes(path.read_bytes().replace(b"Why: exercise", b"Why: tamper"))
    err = refused(sglpatch, checkout, "--patches", patches)
    assert "checksum mismatch" in err and path.name in err


def test_malformed_patch(sglpatch, checkout, patches):
    rewrite_patch(patches, 1, lambda data: data.split(b"\ndiff --git")[0] + b"\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert "malformed patch" in err


def test_series_names_a_missing_file(sglpatch, checkout, patches):
    (patches / "series").write_text((patches / "series").read_text() + "0009-ghost.patch\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert "0009-ghost.patch" in err


@pytest.mark.parametrize(
    "escape, message",
    [
        (b"python/sglang/../../etc/passwd", "not a plain relative path"),
        (b"setup.py", "outside python/sglang/"),
        (b"python/sglang/.git/config", "inside .git/"),
    ],
)
def test_patch_touching_paths_outside_the_package(sglpatch, checkout, patches, escape, message):
    rewrite_patch(patches, 1, lambda data: data.replace(SECOND.encode(), escape))
    err = refused(sglpatch, checkout, "--patches", patches)
    assert message in err


def test_second_apply_in_progress_is_refused(checkout, patches):
    with target_lock(open_target(checkout)):
        before = fingerprint(checkout)
        result = subprocess.run(
            [sys.executable, "-m", "sglpatch", "apply", "--sglang", str(checkout), "--patches", str(patches)],
            capture_output=True,
            text=True,
            env={**os.environ},
        )
    assert result.returncode == 2
    assert "another sglpatch run is working on" in result.stderr and str(os.getpid()) in result.stderr
    assert fingerprint(checkout) == before


def test_package_folder_refuses_three_way(sglpatch, package, patches):
    err = refused(sglpatch, package, "--patches", patches, "--3way")
    assert "--3way needs a git checkout" in err


def test_symlink_leaving_the_package_is_refused(sglpatch, package, patches, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("x = 1\n")
    victim = package / SECOND.removeprefix("python/sglang/")
    victim.unlink()
    victim.symlink_to(outside)
    err = refused(sglpatch, package, "--patches", patches)
    assert "outside the target" in err
    assert outside.read_text() == "x = 1\n"
