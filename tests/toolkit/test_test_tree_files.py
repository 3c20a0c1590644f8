"""A patch may add a test to sglang's own test tree (test/registered/...): a checkout gets it at that
path; a package folder, which has no test tree, gets the patch's package files only; the GPU box's
ci/apply_series.py puts it beside the package, under ROOT/test/."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sglpatch.pin import load_pin
from sglpatch.series import load_series
from testing.sglang_trees import BACKEND, make_series
from testing.tree_bytes import fingerprint

SGLANG_TEST = "test/registered/attention/unittests/dsa/test_dsa_layout_note.py"
TEST_TEXT = '"""A GPU test the patch adds to sglang\'s test tree."""\n'


@pytest.fixture(scope="module")
def test_tree_series(tmp_path_factory, base_repo, project_pin):
    message = (
        "[DSA] Note the layout, with a test in sglang's tree\n\nWhy: exercise test-tree files.\n\n"
        "Extends-PR: 27166\nPatch-Group: test-group\n"
    )
    tmp = tmp_path_factory.mktemp("test-tree")
    return make_series(
        base_repo,
        tmp / "dev",
        tmp / "patches",
        project_pin,
        [
            (
                message,
                [
                    (BACKEND, "class DSAIndexerMetadata", "# noted\nclass DSAIndexerMetadata"),
                    (SGLANG_TEST, None, TEST_TEXT),
                ],
            )
        ],
    )


def test_series_and_pin_name_the_test_tree_file(test_tree_series):
    (patch,) = load_series(test_tree_series).patches
    assert SGLANG_TEST in patch.touched_paths and patch.touches_test_tree
    assert load_pin(test_tree_series).blobs[SGLANG_TEST] == ""  # new at the base
    part = patch.package_part()
    assert part.touched_paths == [BACKEND] and not part.touches_test_tree


def test_checkout_gets_the_test_file_and_revert_removes_it(sglpatch, checkout, test_tree_series):
    code, _, err = sglpatch("apply", "--sglang", checkout, "--patches", test_tree_series)
    assert code == 0, err
    assert (checkout / SGLANG_TEST).read_text() == TEST_TEXT
    assert "# noted" in (checkout / BACKEND).read_text()
    out = sglpatch("status", "--sglang", checkout, "--patches", test_tree_series)[1]
    assert "applied" in out and "conflicts" not in out
    code, _, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert not (checkout / SGLANG_TEST).exists()


def test_package_folder_gets_the_package_part_only(sglpatch, tmp_path, package, test_tree_series):
    before = fingerprint(package.parent)
    code, _, err = sglpatch("apply", "--sglang", package, "--patches", test_tree_series)
    assert code == 0, err
    assert "# noted" in (package / BACKEND.removeprefix("python/sglang/")).read_text()
    assert not list(package.parent.rglob("test_dsa_layout_note.py"))
    code, out, err = sglpatch("apply", "--sglang", package, "--patches", test_tree_series)
    assert code == 0 and out.startswith("already applied"), err
    code, _, err = sglpatch("revert", "--sglang", package)
    assert code == 0, err
    assert fingerprint(package.parent) == before


def test_gpu_box_apply_puts_the_test_beside_the_package(tmp_path, package, test_tree_series):
    root = tmp_path / "box"
    shutil.copytree(package, root / "sglang")
    script = __import__("pathlib").Path(__file__).resolve().parents[2] / "ci" / "apply_series.py"
    done = subprocess.run(
        [sys.executable, str(script), str(test_tree_series), "--root", str(root)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (root / SGLANG_TEST).read_text() == TEST_TEXT
    assert "# noted" in (root / "sglang" / BACKEND.removeprefix("python/sglang/")).read_text()
    assert "test-tree files under test/" in done.stdout
