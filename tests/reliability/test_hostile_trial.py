"""The hostile trial of issue 24 (part B): user files in the way, modes, stale bytecode, CRLF, odd headers.

Each case runs the real CLI on real v0.5.14 trees and compares them byte for byte
(`fault_harness.tree_state`: content and mode of every file, `.git` refs, state
files and index entries): exit 0 and the state the tool names, or one line on
stderr, exit 2, no traceback, and the tree exactly as it was.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from py_compile import PycInvalidationMode

import pytest

from sglpatch import cli
from sglpatch.pin import Pin
from testing.sglang_trees import NEW_FILE, OVERLAP, SECOND
from testing.tree_bytes import tree_state

KINDS = ["checkout", "package"]


@pytest.fixture(params=KINDS)
def target(request):
    """The one kind of tree the case runs on (the other is not made)."""
    return request.getfixturevalue(request.param)


def local(target, upstream_path: str):
    """A series path (upstream layout) inside a checkout or a package folder."""
    if (target / ".git").exists():
        return target / upstream_path
    return target / upstream_path.removeprefix("python/sglang/")


def refused(sglpatch, target, *args, command="apply"):
    """Run a command that must refuse: one line, exit 2, no traceback, the tree as it was."""
    before = tree_state(target)
    code, out, err = sglpatch(command, "--sglang", target, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert tree_state(target) == before
    return err


# -- defect 1: a user file at a path the series creates ---------------------------------


def test_a_user_file_where_the_series_creates_one_is_refused_not_overwritten(sglpatch, target, patches):
    """In a checkout the file is git-ignored (git checkout overwrites ignored files, and revert deleted it)."""
    mine = local(target, NEW_FILE)
    mine.write_text("MINE\n")
    if (target / ".git").exists():
        with open(target / ".git" / "info" / "exclude", "a") as exclude:
            exclude.write(f"/{NEW_FILE}\n")
        assert not subprocess.run(["git", "status", "--porcelain"], cwd=target, capture_output=True).stdout
    err = refused(sglpatch, target, "--patches", patches)
    assert str(mine) in err and "the series creates it" in err, err
    assert mine.read_text() == "MINE\n"


def test_an_untracked_file_where_the_series_creates_one_is_kept(sglpatch, checkout, patches):
    mine = checkout / NEW_FILE
    mine.write_text("MINE\n")
    err = refused(sglpatch, checkout, "--patches", patches)
    assert str(mine) in err, err


# -- defect 13: tracebacks from an odd mail header and a hand-edited state file ------------


@pytest.mark.parametrize(
    "header",
    ["From: =?x-unknown-8?q?Ada?= <ada@example.com>", "From: =?utf-8?b?not*base64?= <ada@example.com>"],
    ids=["unknown-charset", "bad-encoded-word"],
)
def test_a_from_header_that_cannot_be_decoded_is_a_one_line_refusal(sglpatch, target, patches, header):
    first = sorted(patches.glob("0001-*.patch"))[0]
    text = first.read_text()
    lines = [header if line.startswith("From: ") else line for line in text.splitlines()]
    first.write_text("\n".join(lines) + "\n")
    sums = patches / "SHA256SUMS"

    sums.write_text(
        "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in sorted(patches.glob("*.patch")))
    )
    err = refused(sglpatch, target, "--patches", patches)
    assert "malformed patch" in err and first.name in err, err


CORRUPT_RECORDS = {  # what a hand edit makes of the record sglpatch wrote (JSON text)
    "touched-not-names": lambda r: json.dumps({**r, "touched": [1, 2]}),
    "touched-escaping": lambda r: json.dumps({**r, "touched": ["python/sglang/../../../etc/passwd"]}),
    "head-not-a-string": lambda r: json.dumps({**r, "head": 5}),
    "head-not-a-commit": lambda r: json.dumps({**r, "head": "--orphan=x"}),
    "branch-an-option": lambda r: json.dumps({**r, "branch": "--detach"}),
    "previous-empty": lambda r: json.dumps({**r, "previous": ""}),
    "reverting-touched-not-names": lambda r: json.dumps({**r, "state": "reverting", "touched": [5]}),
    "nested-too-deep": lambda r: '{"before":' * 5000 + "{}" + "}" * 5000,
}


@pytest.fixture(scope="module")
def applied_checkout(tmp_path_factory, base_repo, series_dir):
    """One patched checkout for the refusals below: each puts the record back as it was."""
    root = tmp_path_factory.mktemp("corrupt")
    subprocess.run(["git", "clone", "-q", str(base_repo), str(root / "checkout")], check=True)
    for key, value in (("user.name", "Target User"), ("user.email", "target@example.com")):
        subprocess.run(["git", "config", key, value], cwd=root / "checkout", check=True)
    assert cli.main(["apply", "--sglang", str(root / "checkout"), "--patches", str(series_dir)]) == 0
    return root / "checkout"


@pytest.mark.parametrize("corruption", sorted(CORRUPT_RECORDS))
def test_a_hand_corrupted_checkout_state_file_is_a_one_line_refusal(sglpatch, applied_checkout, series_dir, corruption):
    state_file = applied_checkout / ".git" / "sglpatch-state.json"
    record = state_file.read_text()
    state_file.write_text(CORRUPT_RECORDS[corruption](json.loads(record)))
    try:
        for command in ("apply", "revert", "recover"):
            args = ["--patches", series_dir] if command == "apply" else []
            err = refused(sglpatch, applied_checkout, *args, command=command)
            assert f"{state_file} is corrupt" in err, (command, err)
        code, out, err = sglpatch("status", "--sglang", applied_checkout, "--patches", series_dir)  # a report
        assert code == 0 and f"{state_file} is corrupt" in out and "Traceback" not in out + err, (out, err)
    finally:
        state_file.write_text(record)


# -- defect 5: a mode change, and an empty new file (both plain `git format-patch` output) ----------

EMPTY_NEW = "python/sglang/srt/layers/attention/dsa/empty_marker.py"
MODE_ONLY = SECOND  # becomes executable, bytes unchanged
MODE_AND_TEXT = OVERLAP  # becomes executable and gains a line


def _format_patch_series(base_repo, workdir, out, project_pin, commits) -> None:
    """A series as `git format-patch` writes it, without sglpatch's exporter (which parses what it writes)."""
    subprocess.run(["git", "clone", "-q", str(base_repo), str(workdir)], check=True)
    ident = ["-c", "user.name=Ada Patchwright", "-c", "user.email=ada@example.com"]
    for message, edit in commits:
        edit(workdir)
        subprocess.run(["git", "add", "-A"], cwd=workdir, check=True)
        subprocess.run(["git", *ident, "commit", "-q", "-m", message], cwd=workdir, check=True)
    out.mkdir()
    subprocess.run(
        ["git", "format-patch", "-q", "--zero-commit", "--full-index", "-o", str(out), f"{project_pin.tag}..HEAD"],
        cwd=workdir,
        check=True,
    )
    names = sorted(p.name for p in out.glob("*.patch"))
    (out / "series").write_text("".join(f"{name}\n" for name in names))
    sums = "".join(f"{hashlib.sha256((out / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    (out / "SHA256SUMS").write_text(sums)
    touched = subprocess.run(
        ["git", "diff", "--name-only", f"{project_pin.tag}..HEAD"], cwd=workdir, capture_output=True, text=True
    ).stdout.split()
    listed = subprocess.run(
        ["git", "ls-tree", "-r", project_pin.tag, "--", *touched], cwd=workdir, capture_output=True, text=True
    ).stdout
    blobs = {line.split("\t")[1]: line.split()[2] for line in listed.splitlines()}
    pin = Pin(project_pin.release, project_pin.tag, project_pin.date, project_pin.wheel, blobs)
    (out / "pin.json").write_text(pin.to_json())


def _make_executable(path):
    path.chmod(0o755)


def _mode_and_empty(tree):
    _make_executable(tree / MODE_ONLY)
    (tree / EMPTY_NEW).write_bytes(b"")


def _mode_and_text(tree):
    _make_executable(tree / MODE_AND_TEXT)
    with open(tree / MODE_AND_TEXT, "a") as f:
        f.write("# executable now\n")


MODE_SERIES = {  # a series name -> its commits; "mode-and-text" parsed before the fix, "both" did not
    "mode-and-text": [("Executable and edited", _mode_and_text)],
    "both": [
        ("Make a file executable and add an empty one", _mode_and_empty),
        ("Executable and edited", _mode_and_text),
    ],
}


@pytest.fixture(scope="module")
def mode_series(tmp_path_factory, base_repo, project_pin):
    series = {}
    for name, commits in MODE_SERIES.items():
        tmp = tmp_path_factory.mktemp(f"mode-series-{name}")
        _format_patch_series(base_repo, tmp / "dev", tmp / "patches", project_pin, commits)
        series[name] = tmp / "patches"
    text = (series["both"] / "0001-Make-a-file-executable-and-add-an-empty-one.patch").read_text()
    assert "old mode 100644\nnew mode 100755\n" in text and "new file mode 100644\nindex 0000000" in text
    return series


@pytest.mark.parametrize("name", sorted(MODE_SERIES))
def test_a_mode_change_and_an_empty_new_file_apply_and_revert_mode_exact(sglpatch, target, mode_series, name):
    before = tree_state(target)
    code, out, err = sglpatch("apply", "--sglang", target, "--patches", mode_series[name])
    assert code == 0, err
    assert local(target, MODE_AND_TEXT).stat().st_mode & 0o777 == 0o755
    assert local(target, MODE_AND_TEXT).read_text().endswith("# executable now\n")
    if name == "both":
        assert local(target, MODE_ONLY).stat().st_mode & 0o777 == 0o755
        assert local(target, EMPTY_NEW).read_bytes() == b""
    status = sglpatch("status", "--sglang", target, "--patches", mode_series[name])[1]
    assert status.count("  applied") == len(MODE_SERIES[name]), status
    code, out, err = sglpatch("revert", "--sglang", target)
    assert code == 0, err
    assert tree_state(target) == before


def test_a_package_whose_mode_change_was_undone_is_not_called_applied(sglpatch, package, mode_series):
    assert sglpatch("apply", "--sglang", package, "--patches", mode_series["both"])[0] == 0
    local(package, MODE_ONLY).chmod(0o644)
    status = sglpatch("status", "--sglang", package, "--patches", mode_series["both"])[1]
    assert "0001-Make-a-file-executable-and-add-an-empty-one.patch  applied" not in status, status


# -- defect 6: bytecode that Python would use instead of the patched source ---------------------


@pytest.fixture(scope="module")
def verbosity_series(tmp_path_factory, base_repo, project_pin):
    """One patch that changes a value in a module that imports nothing (global_config.py)."""

    def edit(tree):
        path = tree / SECOND
        path.write_text(path.read_text().replace("self.verbosity = 0", "self.verbosity = 7", 1))

    tmp = tmp_path_factory.mktemp("verbosity-series")
    _format_patch_series(base_repo, tmp / "dev", tmp / "patches", project_pin, [("Louder", edit)])
    return tmp / "patches"


def _verbosity_as_python_imports_it(module) -> int:
    """Python's own import of the module file (its __pycache__ included), in a fresh interpreter."""
    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('probe_global_config', {str(module)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(module.GlobalConfig().verbosity)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return int(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    )


def test_stale_unchecked_bytecode_does_not_shadow_the_patched_source(sglpatch, package, verbosity_series):
    module = local(package, SECOND)
    py_compile.compile(
        str(module),
        cfile=importlib.util.cache_from_source(str(module)),
        invalidation_mode=PycInvalidationMode.UNCHECKED_HASH,
    )
    assert _verbosity_as_python_imports_it(module) == 0
    before = tree_state(package)
    assert sglpatch("apply", "--sglang", package, "--patches", verbosity_series)[0] == 0
    assert _verbosity_as_python_imports_it(module) == 7  # and Python wrote a pyc of the patched source
    assert sglpatch("revert", "--sglang", package)[0] == 0
    assert tree_state(package) == before  # the old pyc back, the new one gone
    assert _verbosity_as_python_imports_it(module) == 0


# -- defect 11: a revert gives back the bytes the work tree had, whatever git's eol settings say --------


@pytest.mark.parametrize("cloned_with_crlf", [False, True], ids=["autocrlf-set-after-clone", "cloned-with-autocrlf"])
def test_revert_gives_back_the_bytes_the_work_tree_had(sglpatch, tmp_path, base_repo, patches, cloned_with_crlf):
    checkout = tmp_path / "checkout"
    config = ["-c", "core.autocrlf=true"] if cloned_with_crlf else []
    subprocess.run(["git", *config, "clone", "-q", str(base_repo), str(checkout)], check=True)
    for key, value in (("user.name", "Target User"), ("user.email", "target@example.com"), ("core.autocrlf", "true")):
        subprocess.run(["git", "config", key, value], cwd=checkout, check=True)
    assert (b"\r\n" in (checkout / SECOND).read_bytes()) == cloned_with_crlf
    before = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, err
    code, out, err = sglpatch("revert", "--sglang", checkout)
    assert code == 0, err
    assert tree_state(checkout) == before
