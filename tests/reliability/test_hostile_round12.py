"""The hostile trial of round 12: the user's own git configuration in the repository the toolkit reads or writes
(format-patch's and cherry-pick's settings under `export` and `rebase`, ...), (docs/reliability.md, round 12).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from sglpatch.git import Git, init_repo
from testing.sglang_trees import BACKEND, SECOND, as_tester, make_series, one_patch_series, upstream_branches
from testing.tree_bytes import refused, tree_state

# settings of the user's repository that change what `git format-patch` writes
FORMAT_SETTINGS = [
    ("diff.noprefix", "true"),  # `--- python/...`: malformed, the series refused
    ("format.signOff", "true"),  # the user's Signed-off-by under every patch, whoever wrote it
    ("format.from", "true"),  # the user in `From:`, the author moved into the message
    ("format.coverLetter", "true"),  # a 0000 patch with no diff
    ("diff.context", "0"),
    ("format.headers", "X-Mine: 1"),
    ("format.notes", "true"),  # the user's notes (below) inside the patches
    ("format.suffix", ".diff"),  # no `*.patch` at all: "no commits"
    ("i18n.logOutputEncoding", "latin1"),  # a message past ASCII in Latin-1: "not UTF-8", refused
]
# two patches whose messages hold what export asks of them (docs/series-format.md)
EXPORTED = [
    (
        "[DSA] Mark the indexer metadata for an export\n\nWhy: an export to check.\n\nWhat: one comment.\n\n"
        "Drop when: never; a test.\n\n"
        "Upstream-PR: 1\nPatch-Group: export-test\nDrop-When: never\n",
        [(BACKEND, "class DSAIndexerMetadata", "# exported\nclass DSAIndexerMetadata")],
    ),
    (
        "[Spec] Mark the global config for an export\n\nWhy: the café's test.\n\nWhat: one comment.\n\n"
        "Drop when: never; a test.\n\n"
        "Upstream-PR: 2\nPatch-Group: export-test\nDrop-When: never\n",
        [(SECOND, "class GlobalConfig:", "# exported\nclass GlobalConfig:")],
    ),
]


def _rebase_args(checkout, patches, report, onto) -> tuple:
    return ("--sglang", checkout, "--patches", patches, "--report-dir", report, "--onto", onto, "--release", "0.5.14")


def _series_files(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize(("key", "value"), FORMAT_SETTINGS, ids=[key for key, _ in FORMAT_SETTINGS])
def test_export_writes_the_series_format_whatever_the_repositorys_config(
    sglpatch, base_repo, project_pin, tmp_path, key, value
):
    """`export --from REPO` ran `git format-patch` under REPO's config: `diff.noprefix` made every patch malformed
    (refused), `format.signOff` put the user's sign-off under another author's patches, `format.from` the user in
    `From:`, `format.suffix` wrote no `.patch` ("no commits"), `i18n.logOutputEncoding` a message that is not
    UTF-8 (refused), and the rest changed the patches' bytes. Now the series format is given on the command line:
    the patches are the same bytes whatever the repository says."""
    patches = make_series(base_repo, tmp_path / "dev", tmp_path / "patches", project_pin, EXPORTED)
    before = _series_files(patches)
    git = Git(tmp_path / "dev")
    git.run("config", key, value)
    as_tester(git).run("notes", "add", "-m", "my private note", "HEAD")
    code, out, err = sglpatch("export", "--from", tmp_path / "dev", "--base", "v0.5.14", "--patches", patches)
    assert code == 0, (out, err)
    assert _series_files(patches) == before


@pytest.mark.parametrize(("key", "value"), FORMAT_SETTINGS[:3], ids=[key for key, _ in FORMAT_SETTINGS[:3]])
def test_a_rebase_writes_the_series_format_whatever_the_checkouts_config(
    sglpatch, checkout, patches, tmp_path, key, value
):
    """A rebase writes the new series with `git format-patch` in the user's checkout: with `diff.noprefix` there it
    stopped at its end ("malformed patch: ... lacks the b/ prefix; fix that, then --continue"), which no
    `--continue` could get past; with `format.signOff` or `format.from` it went through, the user's name signed
    under, or put as the sender of, every patch of another author. Now the rebased series is the same bytes."""
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = _series_files(patches)
    Git(checkout).run("config", key, value)
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert _series_files(patches) == before


def test_a_rebase_keeps_a_message_line_that_starts_with_a_hash_under_commit_cleanup_strip(
    sglpatch, checkout, base_repo, project_pin, tmp_path
):
    """`commit.cleanup=strip` in the user's checkout: the rebase's `git cherry-pick` of each patch that lands
    cleanly cleaned its message as an edited one, dropping the line `#1234 is the issue this fixes` from the
    rebased series, "rebased", exit 0 (round 7 mended it for a resolved conflict only). Now the pick keeps the
    message as it is."""
    message = "[Spec] Mark the global config\n\nWhy: a test.\n#1234 is the issue this fixes\n\nUpstream-PR: 29787\n"
    patches = one_patch_series(
        base_repo, project_pin, tmp_path / "patches", message, (SECOND, "class GlobalConfig", "# x\nclass GlobalConfig")
    )
    upstream_branches(checkout, quiet=True)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = _series_files(patches)
    Git(checkout).run("config", "commit.cleanup", "strip")
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0, (out, err)
    assert _series_files(patches) == before


def test_apply_fetches_no_submodule_of_the_checkout_under_submodule_recurse(sglpatch, checkout, patches, tmp_path):
    """The user's checkout holds a submodule of theirs and sets `submodule.recurse=true`. apply's `git fetch` of the
    series branch from its scratch repository then fetched every submodule from its remote too: with the remote out
    of reach (a machine offline, as the GPU boxes are), apply was refused ("Errors during submodule fetch"), the
    submodule's FETCH_HEAD left behind under "nothing changed"; in reach, apply went to the network and moved the
    submodule's remote-tracking branches. Now the fetch is of the series branch alone: apply and revert go through,
    every byte of the checkout and its submodule as it was."""
    submodule = _a_submodule(checkout, tmp_path)
    Git(submodule).run("remote", "set-url", "origin", "https://example.invalid/kernlib")
    git = Git(checkout)
    git.run("config", "submodule.recurse", "true")
    before = tree_state(checkout)
    code, out, err = sglpatch("apply", "--sglang", checkout, "--patches", patches)
    assert code == 0, (out, err)
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert tree_state(checkout) == before


def _a_submodule(checkout, tmp_path):
    """A submodule of the user's (a kernel library of theirs) added on the checkout's branch; its folder."""
    lib = tmp_path / "kernlib"
    library = as_tester(init_repo(lib))
    (lib / "k.cu").write_text("kernel\n")
    library.run("add", "k.cu")
    library.run("commit", "-q", "-m", "kernel")
    git = as_tester(Git(checkout))
    git.run("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "third_party/kernlib")
    git.run("commit", "-q", "-m", "my kernel library")
    return checkout / "third_party" / "kernlib"


def test_a_rebase_of_a_checkout_holding_a_submodule_onto_a_release_without_it(sglpatch, checkout, patches, tmp_path):
    """The user's branch holds a submodule of theirs that ONTO does not (or holds at another commit). The rebase
    sized the room to switch back with `git ls-tree -l`, which gives a submodule no size (`-`): a traceback
    (`ValueError: invalid literal for int()`) before the first write. Now it goes through, the submodule's files
    as they were, and revert takes it back."""
    upstream_branches(checkout, quiet=True)
    submodule = _a_submodule(checkout, tmp_path)
    (submodule / "build.o").write_bytes(b"\0my build\n")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    before = tree_state(submodule)
    code, out, err = sglpatch("rebase", *_rebase_args(checkout, patches, tmp_path / "report", "quiet"))
    assert code == 0 and "rebased onto quiet" in out, (out, err)
    assert tree_state(submodule) == before
    assert sglpatch("revert", "--sglang", checkout)[0] == 0
    assert tree_state(submodule) == before


@pytest.mark.parametrize("hidden", ["--assume-unchanged", "--skip-worktree"])
def test_clean_keeps_a_default_base_holding_an_edit_git_status_does_not_show(
    sglpatch, series_project, base_repo, hidden
):
    """build/sglang, a checkout as sglpatch lays it out, where the user edited a file whose index entry tells git
    not to look at it (`git update-index --assume-unchanged` or `--skip-worktree`, the usual way to keep a local
    edit out of git's way). clean asked `git status`, which shows no such edit: the checkout was deleted with it,
    exit 0. Now the bytes of such files are compared with their entries: refused, naming the file."""
    where = series_project / "build" / "sglang"
    where.parent.mkdir()
    subprocess.run(["git", "clone", "-q", str(base_repo), str(where)], check=True)
    Git(where).run("update-index", hidden, BACKEND)
    (where / BACKEND).write_text("my local edit\n")
    err = refused(sglpatch, series_project, command="clean")
    assert f"holds edits to {BACKEND}" in err and "nothing was deleted" in err, err


def _signed(git: Git, rev: str) -> str:
    """A commit as `rev`, with a signature header (gpg cannot verify it: enough for git to run gpg on it)."""
    text = git.run("cat-file", "commit", rev, strip=False)
    head, _, message = text.partition("\n\n")
    signature = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----"
    return git.run("hash-object", "-t", "commit", "-w", "--stdin", stdin=f"{head}\n{signature}\n\n{message}".encode())


def test_a_git_log_read_under_log_show_signature_holds_only_what_its_format_asks(
    sglpatch, checkout, patches, project_pin, tmp_path, monkeypatch
):
    """`log.showSignature=true` in the user's checkout, and a signed commit (upstream's merges are). Every `git
    log --format=...` the toolkit reads then began with gpg's lines: a rebase of a DeepGEMM line took them for its
    new pin's date (written into pin.json), and the refusal of a commit of the user's past the series, which names
    its subject, was many lines of gpg's. Now no git sglpatch runs shows signatures."""
    from sglpatch.pin import Pin
    from sglpatch.project_kind import DEEP_GEMM
    from sglpatch.rebase.rebase_engine import _pin_for

    monkeypatch.setenv("GNUPGHOME", str(tmp_path / "gnupg"))  # gpg's own folder, not the home's
    (tmp_path / "gnupg").mkdir(mode=0o700)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    git = as_tester(Git(checkout))
    git.run("commit", "-q", "--allow-empty", "-m", "my work past the series")
    git.run("update-ref", "HEAD", _signed(git, "HEAD"))
    git.run("config", "log.showSignature", "true")
    args = _rebase_args(checkout, patches, tmp_path / "report", "main")
    err = refused(sglpatch, checkout, *args, command="rebase")
    assert "my work past the series" in err and "gpg" not in err, err
    commit = git.run("rev-parse", "HEAD")
    old = Pin(commit[:7], f"deep_gemm/{commit[:7]}", "2026-06-23", project_pin.wheel, {}, DEEP_GEMM, commit)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", _pin_for(commit[:7], old, Git(checkout), commit).date)
