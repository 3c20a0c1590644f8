"""apply / status / revert on an installed-package folder (site-packages/sglang)."""

from __future__ import annotations

import subprocess

from sglpatch.series import load_series
from sglpatch.targets import journal
from sglpatch.targets.write_states import WriteState
from testing.sglang_trees import BACKEND, NEW_FILE, SECOND
from testing.tree_bytes import fingerprint


def _local(package, upstream_path):
    return package / upstream_path.removeprefix("python/sglang/")


def test_apply_rewrites_files_and_revert_restores_every_byte(sglpatch, package, patches):
    before = fingerprint(package)
    code, out, err = sglpatch("apply", "--sglang", package, "--patches", patches)
    assert code == 0, err
    assert "# test series: second patch" in _local(package, SECOND).read_text()
    assert _local(package, NEW_FILE).is_file()
    assert journal.read_journal(package).state == WriteState.APPLIED
    assert not list(package.rglob("*.rej")) and not list(package.rglob("*.sglpatch-tmp"))
    code, out, err = sglpatch("revert", "--sglang", package)
    assert code == 0, err
    assert fingerprint(package) == before


def test_site_packages_folder_is_detected_and_mapped(sglpatch, package, patches):
    code, out, err = sglpatch("apply", "--sglang", package.parent, "--patches", patches)
    assert code == 0, err
    assert "# test series: first patch" in _local(package, BACKEND).read_text()


def test_second_apply_is_a_no_op(sglpatch, package, patches):
    sglpatch("apply", "--sglang", package, "--patches", patches)
    before = fingerprint(package)
    code, out, _ = sglpatch("apply", "--sglang", package, "--patches", patches)
    assert code == 0 and out.startswith("already applied")
    assert fingerprint(package) == before


def test_status_on_a_package(sglpatch, package, patches):
    out = sglpatch("status", "--sglang", package, "--patches", patches)[1]
    assert "(package folder)" in out and out.count("applies cleanly") == 2


def test_revert_refuses_to_drop_an_edit_made_after_apply(sglpatch, package, patches):
    sglpatch("apply", "--sglang", package, "--patches", patches)
    edited = _local(package, SECOND)
    edited.write_text(edited.read_text() + "# user edit\n")
    before = fingerprint(package)
    code, _, err = sglpatch("revert", "--sglang", package)
    assert code == 2 and "changed since sglpatch wrote it" in err
    assert fingerprint(package) == before


def test_revert_without_journal_is_refused(sglpatch, package):
    code, _, err = sglpatch("revert", "--sglang", package)
    assert code == 2 and "nothing to revert" in err


def test_the_series_applies_with_patch_p1_like_quilt(tmp_path, base_repo, patches):
    """quilt pushes each series entry with `patch -p1` from the tree's root."""
    tree = tmp_path / "tree"
    tree.mkdir()
    subprocess.run(["cp", "-r", str(base_repo / "python"), str(tree)], check=True)
    for patch in load_series(patches).patches:
        subprocess.run(["patch", "-p1", "-s", "--dry-run", "-i", str(patch.path)], cwd=tree, check=True)
        subprocess.run(["patch", "-p1", "-s", "-i", str(patch.path)], cwd=tree, check=True)
    assert "# test series: second patch" in (tree / SECOND).read_text()
    assert not list(tree.rglob("*.orig")) and not list(tree.rglob("*.rej"))
