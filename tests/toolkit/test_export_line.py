"""`export`: `--line L` takes the line's folder and tag, so `make export FROM=REPO LINE=v0.5.23` needs no BASE;
a commit whose message lacks what the series format requires is refused before anything is written."""

from __future__ import annotations

import os
import subprocess

import pytest

from sglpatch.git import Git
from sglpatch.series import load_series
from testing.sglang_trees import SECOND, as_tester, one_patch_series
from testing.tree_bytes import fingerprint

COMPLETE = (
    "[Spec] Mark the global config for an export\n\nWhy: an export to check.\n\nWhat: one comment.\n\n"
    "Drop when: never; a test.\n\nUpstream-PR: 1\nPatch-Group: export-test\nDrop-When: never\n"
)
_OUT = {"capture_output": True, "check": True}
EDIT = (SECOND, "class GlobalConfig:", "# exported\nclass GlobalConfig:")


@pytest.fixture
def exported(tmp_path, base_repo, project_pin):
    """A one-patch series (the folder) and the repo it came from (its sibling `dev`)."""
    return one_patch_series(base_repo, project_pin, tmp_path / "patches", COMPLETE, EDIT)


def test_line_gives_the_base_tag(sglpatch, tmp_path, exported):
    names = [p.name for p in load_series(exported).patches]
    for patch in exported.glob("*.patch"):
        patch.unlink()
    code, stdout, err = sglpatch("export", "--from", tmp_path / "dev", "--line", "v0.5.14", "--patches", exported)
    assert code == 0, err
    assert "wrote 1 patches" in stdout
    assert [p.name for p in load_series(exported).patches] == names


def test_export_without_base_or_line_is_refused(sglpatch, tmp_path, exported):
    code, _, err = sglpatch("export", "--from", tmp_path / "dev", "--patches", tmp_path / "p")
    assert code == 2 and "needs --base" in err


@pytest.mark.parametrize(
    "drop, missing",
    [
        ("What: one comment.\n\n", "a 'What:' paragraph"),
        ("Drop-When: never\n", "a Drop-When trailer"),
        ("Upstream-PR: 1\n", "an Upstream-PR or Extends-PR trailer, or a Prior-Art one"),
    ],
)
def test_a_commit_without_what_the_series_needs_is_refused_naming_it(sglpatch, tmp_path, exported, drop, missing):
    """Issue 36: export wrote such a patch, and only `make test` noticed. Now one line names the commit and
    what it lacks, and the series folder is as it was."""
    dev = Git(tmp_path / "dev")
    as_tester(dev).run("commit", "-q", "--amend", "-m", COMPLETE.replace(drop, ""))
    commit = dev.run("rev-parse", "HEAD")[:12]
    before = fingerprint(exported)
    code, out, err = sglpatch("export", "--from", dev.workdir, "--line", "v0.5.14", "--patches", exported)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"commit {commit} ([Spec] Mark the global config for an export) lacks {missing}" in err, err
    assert "nothing was written" in err and "series-format.md" in err
    assert fingerprint(exported) == before


def test_a_patch_the_series_does_not_list_survives_an_export_and_is_never_overwritten(sglpatch, tmp_path, exported):
    """Issue 48 B: writing a series folder deleted every `*.patch` its series did not list (a user's work in
    progress). Only the old series' own patches are replaced; a file of the user's in the way is refused."""
    mine = exported / "0007-my-wip.patch"
    mine.write_text("my work in progress\n")
    dev = Git(tmp_path / "dev")
    old = [p.name for p in load_series(exported).patches]
    as_tester(dev).run("commit", "-q", "--amend", "-m", COMPLETE.replace("[Spec] Mark", "[Spec] Mark again"))
    code, out, err = sglpatch("export", "--from", dev.workdir, "--line", "v0.5.14", "--patches", exported)
    assert code == 0, err
    assert mine.read_text() == "my work in progress\n"
    new = [p.name for p in load_series(exported).patches]
    assert new != old and not (exported / old[0]).exists()
    in_the_way = exported / new[0]
    old_text = in_the_way.read_text()
    (exported / "series").write_text("".join(f"{name}\n" for name in old))  # the user lists another patch
    (exported / old[0]).write_text(old_text)
    in_the_way.write_text("mine, not listed\n")
    before = fingerprint(exported)
    code, out, err = sglpatch("export", "--from", dev.workdir, "--line", "v0.5.14", "--patches", exported)
    assert code == 2 and str(in_the_way) in err and "move that file away" in err, err
    assert fingerprint(exported) == before


def test_a_commit_made_under_a_latin1_commit_encoding_exports_as_utf8(sglpatch, tmp_path, exported, monkeypatch):
    """A user whose git keeps messages in Latin-1 (`i18n.commitEncoding` and `i18n.logOutputEncoding`
    ISO-8859-1): their commit's bytes are Latin-1 under an `encoding` header, and the patch is still UTF-8."""
    config = tmp_path / "user-gitconfig"
    config.write_text("[i18n]\n\tcommitEncoding = ISO-8859-1\n\tlogOutputEncoding = ISO-8859-1\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    message = tmp_path / "message"
    message.write_bytes(COMPLETE.replace("an export to check", "the café export").encode("latin-1"))
    author = "--author=Zoë <zoe@example.com>".encode("latin-1")
    dev = str(tmp_path / "dev")
    # the user's own git (not the toolkit's, which reads and writes UTF-8 whatever the config says)
    env = {**os.environ, "GIT_COMMITTER_NAME": "Zoe", "GIT_COMMITTER_EMAIL": "zoe@example.com"}
    subprocess.run(["git", "-C", dev, "commit", "-q", "--amend", "-F", str(message), author], check=True, env=env)
    assert b"encoding ISO-8859-1" in subprocess.run(["git", "-C", dev, "cat-file", "commit", "HEAD"], **_OUT).stdout
    code, _, err = sglpatch("export", "--from", tmp_path / "dev", "--line", "v0.5.14", "--patches", exported)
    assert code == 0, err
    (patch,) = exported.glob("*.patch")
    text = patch.read_bytes()
    assert b"charset=UTF-8" in text and "the café export".encode() in text and b"=?UTF-8?q?Zo=C3=AB?=" in text
