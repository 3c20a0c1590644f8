"""The hostile trial of issue 24 (part B): user files in the way, modes, stale bytecode, CRLF, odd headers.

Each case runs the real CLI on real v0.5.14 trees and compares them byte for byte
(`fault_harness.tree_state`: content and mode of every file, `.git` refs, state
files and index entries): exit 0 and the state the tool names, or one line on
stderr, exit 2, no traceback, and the tree exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from sglpatch import cli
from testing.fault_harness import tree_state
from testing.sglang_trees import NEW_FILE

KINDS = ["checkout", "package"]

@pytest.fixture(params=KINDS)
def target(request, checkout, package):
    return {"checkout": checkout, "package": package}[request.param]

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
        for command in ("apply", "revert", "recover", "status"):
            args = ["--patches", series_dir] if command in ("apply", "status") else []
            err = refused(sglpatch, applied_checkout, *args, command=command)
            assert f"{state_file} is corrupt" in err, (command, err)
    finally:
        state_file.write_text(record)
