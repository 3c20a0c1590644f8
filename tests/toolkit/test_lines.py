"""Series lines: which line a target gets (by its sglang version, or LINE=), each line's default base,
and apply / revert on real trees of each line's release.

A project of two lines is made in a temp dir: v0.5.14 (the small test series) and v0.5.16 (one real
patch on sglang 0.5.16, from its PyPI wheel). The project's own lines are applied to trees made from
their pinned wheels and reverted byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglpatch.git import Git, init_repo
from sglpatch.lines import all_lines, line_for_version
from sglpatch.pin import Pin, Wheel, load_pin
from sglpatch.project import PROJECT_ROOT
from sglpatch.rebase.releases import check_out_release, release_date
from sglpatch.wheels import fetch_wheel, file_sha256
from testing.sglang_trees import SECOND, one_patch_series
from testing.tree_bytes import fingerprint

# sglang's lines (their trees come from wheels); the DeepGEMM line's own tests are test_deep_gemm_line.py
PROJECT_LINES = [line for line in all_lines(PROJECT_ROOT / "patches") if not line.project.from_git]
NEEDS_0516 = pytest.mark.network  # the 0.5.16 wheel, unless cached


@pytest.fixture(scope="session")
def line_0516(tmp_path_factory, project_pin) -> Path:
    """A v0.5.16 line: one patch to global_config.py on the real 0.5.16 tree, exported like ours."""
    wheel = fetch_wheel("0.5.16")
    pin = Pin(
        "0.5.16",
        "v0.5.16",
        release_date(wheel, "0.5.16"),
        Wheel(wheel.name, file_sha256(wheel), project_pin.wheel.python_version, project_pin.wheel.platform),
        {SECOND: ""},
    )
    tmp = tmp_path_factory.mktemp("line-0516")
    base = tmp / "base"
    check_out_release(init_repo(base), "0.5.16", wheel, date=pin.date)
    message = "[Spec] Mark the global config on the 0.5.16 line\n\nWhy: a second line.\n\nUpstream-PR: 29787\n"
    edit = (SECOND, "class GlobalConfig", "# test line 0.5.16\nclass GlobalConfig")
    return one_patch_series(base, pin, tmp / "v0.5.16", message, edit)


@pytest.fixture
def project(tmp_path, series_dir, line_0516, monkeypatch) -> Path:
    root = tmp_path / "project"
    shutil.copytree(series_dir, root / "patches" / "v0.5.14")
    shutil.copytree(line_0516, root / "patches" / "v0.5.16")
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    return root


def _package_from_wheel(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest, [name for name in archive.namelist() if name.startswith("sglang/")])
    return dest / "sglang"


def _checkout_of(release: str, dest: Path) -> Path:
    check_out_release(init_repo(dest), release, fetch_wheel(release))
    Git(dest).run("config", "user.name", "Target User")
    Git(dest).run("config", "user.email", "target@example.com")
    return dest


def _work_tree(checkout: Path) -> dict[str, str]:
    """Every file of a checkout outside .git, by content hash."""
    return {path: digest for path, digest in fingerprint(checkout).items() if not path.startswith(".git/")}


def _set_version(package: Path, version: str) -> None:
    path = package / "_version.py"
    text = path.read_text()
    old = next(line for line in text.splitlines() if line.startswith("__version__"))
    path.write_text(text.replace(old, f"__version__ = version = '{version}'"))


# -- the project's own lines ------------------------------------------------------------------


def test_each_project_line_is_named_after_its_pin_and_the_oldest_is_the_default():
    assert PROJECT_LINES and PROJECT_LINES[0].name == "v0.5.14"
    for line in PROJECT_LINES:
        assert load_pin(line.directory).tag == line.name == line.pin().tag
    default = PROJECT_LINES[0]
    assert default.default_base == PROJECT_ROOT / "build" / "sglang"
    assert default.tests_dir == PROJECT_ROOT / "tests" / "patched"
    for line in PROJECT_LINES[1:]:
        assert line.default_base == PROJECT_ROOT / "build" / f"sglang-{line.name}"
        assert line.tests_dir.name == "patched_" + line.name.replace(".", "_")


@pytest.mark.parametrize("line", PROJECT_LINES, ids=lambda line: line.name)
def test_each_project_line_applies_to_its_real_wheel_tree_and_reverts_byte_exact(sglpatch, tmp_path, line):
    pin = line.pin()
    package = _package_from_wheel(fetch_wheel(pin.release, pin.wheel), tmp_path / "site-packages")
    before = fingerprint(package)
    code, out, err = sglpatch("apply", "--sglang", package)
    assert code == 0, err
    assert f"line {line.name}" in out
    assert fingerprint(package) != before
    code, out, err = sglpatch("revert", "--sglang", package)
    assert code == 0, err
    assert fingerprint(package) == before


def _git_am_recipes(line) -> set[str]:
    """The `git am` line as the README, docs/series-format.md and the line's own series file print it."""
    texts = [PROJECT_ROOT / "README.md", PROJECT_ROOT / "docs" / "series-format.md", line.directory / "series"]
    return {found for text in texts for found in re.findall(r"`(git am --keep-non-patch [^`]+)`", text.read_text())}


@pytest.mark.parametrize("line", PROJECT_LINES, ids=lambda line: line.name)
def test_each_project_line_goes_on_with_the_git_am_line_as_printed(tmp_path, line):
    """The plain-git way per line, as the docs print it, pasted in a checkout of its tag with P the line's folder
    (issue 48: the README's line named patches/ relative to the checkout, the series file's the series folder)."""
    checkout = _checkout_of(line.release, tmp_path / "checkout")
    names = [n.split()[0] for n in (line.directory / "series").read_text().splitlines() if n and n[0] != "#"]
    recipes = _git_am_recipes(line)
    assert len(recipes) == 1, recipes  # one line, the same everywhere
    pasted = f"P={shlex.quote(str(line.directory))}\n{recipes.pop()}\n"
    result = subprocess.run(["bash", "-c", pasted], cwd=checkout, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert Git(checkout).run("rev-list", "--count", f"{line.name}..HEAD") == str(len(names))
    subjects = Git(checkout).run("log", "--reverse", "--format=%s", f"{line.name}..HEAD").splitlines()
    assert all(subject.startswith(("[DSA]", "[Spec]")) for subject in subjects), subjects


# -- which line a target gets ------------------------------------------------------------------


def _fake_lines(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "series").write_text("0001-x.patch\n")
        (root / name / "pin.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    "version, expected",
    [
        ("0.5.14", "v0.5.14"),
        ("0.5.14.post2", "v0.5.14"),
        ("0.5.14+local.build", "v0.5.14"),
        ("0.5.23", "v0.5.23"),
        ("0.5.17", None),
        ("0.5.15.dev3+g1234abc", None),  # a development version names a release not made yet
        ("0.5.15rc1", None),
        ("not a version", None),
    ],
)
def test_a_version_matches_the_line_of_its_release(tmp_path, version, expected):
    root = _fake_lines(tmp_path / "patches", ["v0.5.23", "v0.5.14", "notes"])
    line = line_for_version(version, root)
    assert (line.name if line else None) == expected
    assert [line.name for line in all_lines(root)] == ["v0.5.14", "v0.5.23"]


@NEEDS_0516
def test_apply_picks_the_line_matching_each_target(sglpatch, project, package, tmp_path):
    code, out, err = sglpatch("apply", "--sglang", package)
    assert code == 0, err
    assert "line v0.5.14" in out and "# test series: second patch" in (package / "global_config.py").read_text()
    checkout = _checkout_of("0.5.16", tmp_path / "checkout-0516")
    before = _work_tree(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout)
    assert code == 0, err
    assert "line v0.5.16" in out and "on branch sglpatch/v0.5.16" in out
    assert "# test line 0.5.16" in (checkout / SECOND).read_text()
    code, out, err = sglpatch("status", "--sglang", checkout)
    assert code == 0 and "line:   v0.5.16" in out, err
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert _work_tree(checkout) == before and Git(checkout).current_branch() == "main"
    assert Git(checkout).rev_parse("refs/heads/sglpatch/v0.5.16") is None


@NEEDS_0516
def test_no_matching_line_is_refused_in_one_line_and_the_tree_is_untouched(sglpatch, project, package):
    _set_version(package, "0.5.17")
    before = fingerprint(package)
    code, out, err = sglpatch("apply", "--sglang", package)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "sglang 0.5.17" in err and "lines: v0.5.14, v0.5.16" in err and "pass --line LINE to apply one" in err
    # issue 48: which line is nearest, and the way forward from it
    assert "nearest line below it there: `sglpatch rebase --line v0.5.16 --onto 0.5.17`" in err, err
    assert "writes the line v0.5.17" in err, err
    assert fingerprint(package) == before


@NEEDS_0516
def test_line_overrides_the_version(sglpatch, project, package):
    _set_version(package, "0.5.17")
    code, out, err = sglpatch("apply", "--sglang", package, "--line", "v0.5.14")
    assert code == 0, err
    assert "# test series: second patch" in (package / "global_config.py").read_text()
    code, _, err = sglpatch("apply", "--sglang", package, "--line", "v0.9.0")
    assert code == 2 and "no series line 'v0.9.0'; the lines are: v0.5.14, v0.5.16" in err


@NEEDS_0516
def test_a_post_release_package_takes_its_release_line(sglpatch, project, package):
    _set_version(package, "0.5.14.post1")
    code, out, err = sglpatch("apply", "--sglang", package)
    assert code == 0 and "line v0.5.14" in out, err


@NEEDS_0516
def test_a_development_checkout_goes_by_its_nearest_release_tag(sglpatch, project, checkout):
    """setuptools-scm names a commit after v0.5.14 `0.5.15.devN`: the tag it grew from picks the line."""
    _set_version(checkout / "python" / "sglang", "0.5.15.dev2+g0123abc")
    Git(checkout).run("commit", "-qam", "a development commit")
    code, out, err = sglpatch("apply", "--sglang", checkout)
    assert code == 0 and "line v0.5.14" in out, err


@NEEDS_0516
def test_a_package_that_names_no_version_is_refused(sglpatch, project, package):
    (package / "_version.py").unlink()
    before = fingerprint(package)
    code, _, err = sglpatch("apply", "--sglang", package)
    assert code == 2 and "names no version" in err and "pass --line LINE to apply one as it is" in err
    assert fingerprint(package) == before


@NEEDS_0516
def test_line_without_a_target_builds_that_lines_default_base(sglpatch, project):
    code, out, err = sglpatch("apply", "--line", "v0.5.16")
    assert code == 0, err
    base = project / "build" / "sglang-v0.5.16"
    git = Git(base)
    assert git.run("rev-list", "--count", "v0.5.16..HEAD") == "1"
    assert git.current_branch() == "sglpatch/v0.5.16"
    assert not (project / "build" / "sglang").exists()  # the default line's base is not made by it
    code, out, _ = sglpatch("status", "--line", "v0.5.16")
    assert code == 0 and "line:   v0.5.16" in out and str(base) in out
    assert sglpatch("revert", "--line", "v0.5.16")[0] == 0
    assert git.current_branch() != "sglpatch/v0.5.16" and git.run("rev-parse", "HEAD") == git.rev_parse("v0.5.16^{}")
    code, out, err = sglpatch("apply")
    assert code == 0 and "line v0.5.14" in out, err
    assert Git(project / "build" / "sglang").run("rev-list", "--count", "v0.5.14..HEAD") == "2"


@NEEDS_0516
def test_a_line_whose_pin_names_another_tag_is_refused(sglpatch, project):
    pin_path = project / "patches" / "v0.5.16" / "pin.json"
    pin = json.loads(pin_path.read_text())
    pin["sglang"]["tag"] = "v0.5.15"
    pin_path.write_text(json.dumps(pin))
    code, _, err = sglpatch("apply", "--line", "v0.5.16")
    assert code == 2 and "pins v0.5.15, but a line's folder is named after its pin's tag" in err
    assert not (project / "build").exists()


@NEEDS_0516
def test_drift_shows_each_line_against_the_releases_from_its_base_on(sglpatch, project, tmp_path):
    code, out, err = sglpatch("drift", "--releases", "0.5.14,0.5.16", "--out", tmp_path / "drift")
    assert code == 0, err
    older = json.loads((tmp_path / "drift" / "v0.5.14" / "drift.json").read_text())["releases"]
    newer = json.loads((tmp_path / "drift" / "v0.5.16" / "drift.json").read_text())["releases"]
    assert list(older) == ["0.5.14", "0.5.16"] and list(newer) == ["0.5.16"]
    assert [cell["outcome"] for cell in newer["0.5.16"].values()] == ["clean"]
    assert "== line v0.5.14" in out and "== line v0.5.16" in out


@NEEDS_0516
def test_make_test_finds_each_lines_own_tests_folder(sglpatch, project):
    (project / "tests" / "patched_v0_5_16").mkdir(parents=True)
    code, out, err = sglpatch("lines", "--test-folders")
    assert code == 0 and out == "v0.5.16 tests/patched_v0_5_16\n", err
    code, out, err = sglpatch("lines")
    assert "v0.5.14 (default): 2 patches" in out and "default base: build/sglang-v0.5.16" in out, err


@pytest.mark.parametrize("args", [["lines"], ["lines", "--test-folders"]])
def test_a_reader_that_stops_reading_ends_the_listing_quietly(args):
    """Issue 36: `sglpatch lines | head -1` said "error: cannot access (Broken pipe)". With the pipe's reader gone
    before the first line (so every write fails), the command ends quietly, as git and coreutils do."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sglpatch", *args], stdout=write_end, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write_end)
    assert result.returncode == 0 and result.stderr == "", result.stderr
