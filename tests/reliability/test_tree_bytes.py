"""The byte-for-byte pictures the suites compare trees with (testing/tree_bytes.py) see every change.

They remember a file's digest under its stat identity; these tests change files in the ways that could
fool such a memory (the same size, the old mtime put back, a write right after the hash) and check that
each change shows, and that the pictures match a plain re-reading of every file.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from testing import tree_bytes
from testing.tree_bytes import _RACY_NS, file_digest, fingerprint, tree_state

SETTLED_S = 2 * _RACY_NS / 1e9  # long enough for a file's times to leave the racy window


def plain_tree_state(root: Path) -> dict[str, str]:
    """tree_state as the suites first wrote it: walk with pathlib, hash every file, remember nothing."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        in_git = rel_dir.parts[:1] == (".git",)
        if rel_dir.parts[:2] in ((".git", "objects"), (".git", "logs")):
            dirnames[:] = []
            continue
        for name in dirnames:
            if (here / name).is_symlink():
                state[str(rel_dir / name)] = f"link:{os.readlink(here / name)}"
            elif not in_git and str(rel_dir / name) != ".git":
                state[str(rel_dir / name)] = "dir"
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
        for name in filenames:
            path, rel = here / name, str(rel_dir / name)
            if rel == ".git/index":
                continue
            if path.is_symlink():
                state[rel] = f"link:{os.readlink(path)}"
            else:
                state[rel] = f"{path.lstat().st_mode & 0o7777:o}:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=root, capture_output=True, check=True).stdout
    state[".git/index (entries)"] = hashlib.sha256(listed).hexdigest()
    return state


def plain_fingerprint(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "objects" not in p.relative_to(root).parts
    }


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (root / "pkg" / "deep" / "tool.sh").write_text("#!/bin/sh\n")
    (root / "pkg" / "deep" / "tool.sh").chmod(0o755)
    (root / "pkg" / "empty").mkdir()
    (root / "pkg" / "to-file").symlink_to("mod.py")
    (root / "pkg" / "to-folder").symlink_to("deep")
    (root / "pkg" / "broken").symlink_to("nowhere")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "add", "pkg/mod.py"], cwd=root, check=True)
    return root


def test_the_pictures_match_a_plain_reading_of_every_file(tree):
    assert tree_state(tree) == plain_tree_state(tree)
    assert fingerprint(tree) == plain_fingerprint(tree)
    assert "pkg/to-folder/tool.sh" not in fingerprint(tree)  # a link to a folder is not walked into
    assert tree_state(tree)["pkg/to-folder"] == "link:deep" and tree_state(tree)["pkg/empty"] == "dir"


def test_a_same_size_rewrite_with_the_old_mtime_put_back_shows(tree):
    module = tree / "pkg" / "mod.py"
    time.sleep(SETTLED_S)
    before = tree_state(tree)  # the digest is remembered now: the file's times have settled
    times = module.stat()
    module.write_text("VALUE = 2\n")
    os.utime(module, ns=(times.st_atime_ns, times.st_mtime_ns))
    after = tree_state(tree)
    assert after["pkg/mod.py"] != before["pkg/mod.py"]
    assert after == plain_tree_state(tree) and fingerprint(tree) == plain_fingerprint(tree)


def test_a_rewrite_right_after_the_hash_shows(tree):
    module = tree / "pkg" / "mod.py"
    for value in range(3, 8):  # each rewrite inside the racy window of the hash before it
        module.write_text(f"VALUE = {value}\n")
        assert fingerprint(tree)["pkg/mod.py"] == hashlib.sha256(module.read_bytes()).hexdigest()


def test_a_file_still_in_the_racy_window_is_hashed_every_time(tree, monkeypatch):
    """Where file times are coarse (a jiffy), two writes of one size inside one tick leave the stat identity
    as it was: a digest is remembered only once the file's times are older than the window. The window is
    widened, then closed, so that a loaded machine's delays cannot move the file across it."""
    module = str(tree / "pkg" / "mod.py")
    monkeypatch.setattr(tree_bytes, "_RACY_NS", 3600 * 10**9)  # the file was written "just now"
    file_digest(module)
    assert not [key for key in tree_bytes._digests if key[0] == module]
    monkeypatch.setattr(tree_bytes, "_RACY_NS", 0)
    file_digest(module)
    assert [key for key in tree_bytes._digests if key[0] == module]


def test_a_mode_change_and_a_new_index_entry_show(tree):
    time.sleep(SETTLED_S)
    before = tree_state(tree)
    (tree / "pkg" / "mod.py").chmod(0o600)
    subprocess.run(["git", "add", "pkg/deep/tool.sh"], cwd=tree, check=True)
    after = tree_state(tree)
    assert before.keys() == after.keys()
    assert {k for k in after if after[k] != before[k]} == {"pkg/mod.py", ".git/index (entries)"}
