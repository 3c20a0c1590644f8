"""Hostile and broken input, through the CLI: every refusal is one line, exit 2, and writes nothing.

tests/toolkit/test_refusals.py has the first cases (../, setup.py, .git/ on a
checkout; a file symlink in a package; checksum and missing-file refusals);
these add the rest, on both kinds of target, compared byte for byte with the
reliability suite's strict tree state (folders, modes, .git refs and state).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglpatch.git import Git
from sglpatch.series import SUMS_FILE, load_series, sha256_hex
from testing.fault_harness import FULL_GRID
from testing.sglang_trees import copy_package
from testing.tree_bytes import tree_state

KINDS = ["checkout", "package"]


@pytest.fixture(scope="module")
def shared_targets(tmp_path_factory, base_repo):
    """One checkout and one package folder for the refusal tests: a refusal writes nothing, so they can share."""
    root = tmp_path_factory.mktemp("hostile")
    subprocess.run(["git", "clone", "-q", str(base_repo), str(root / "checkout")], check=True)
    copy_package(base_repo, root / "site-packages" / "sglang")
    return {"checkout": root / "checkout", "package": root / "site-packages" / "sglang"}


@pytest.fixture(params=KINDS)
def target(request, shared_targets):
    return shared_targets[request.param]


def refused(sglpatch, target, *args, command="apply"):
    before = tree_state(target)
    code, out, err = sglpatch(command, "--sglang", target, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert tree_state(target) == before
    return err


def edit_patch(patches, index, edit):
    """Damage one patch and record its new checksum, so the damage itself is what is caught."""
    names = [p.name for p in load_series(patches).patches]
    path = patches / names[index]
    path.write_bytes(edit(path.read_bytes()))
    (patches / SUMS_FILE).write_text("".join(f"{sha256_hex((patches / n).read_bytes())}  {n}\n" for n in names))


def touched(patches, index=0):
    return load_series(patches).patches[index].touched_paths[0]


# -- paths in patches ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make_escape, message",
    [
        (lambda p: (f"a/{p}", "a//etc/passwd"), "not a plain relative path"),
        (lambda p: (f"a/{p}", "/etc/passwd"), "lacks the a/ prefix"),
        (lambda p: (f"b/{p}", '"b/python/sglang/\\056\\056/\\056\\056/setup.py"'), "not a plain relative path"),
        (lambda p: (f"a/{p}", "a/python\\sglang\\..\\..\\evil.py"), "not a plain relative path"),
        (lambda p: (p, "python/sglang/.git/hooks/post-checkout"), "inside .git/"),
        (lambda p: (p, "python/sglang/.GIT/config"), "inside .git/"),
    ],
    ids=["absolute", "no-prefix", "quoted-dotdot", "backslash", "dot-git", "dot-git-case"],
)
def test_patch_paths_escaping_the_tree(sglpatch, target, patches, make_escape, message):
    old, new = make_escape(touched(patches, 1))
    edit_patch(patches, 1, lambda data: data.replace(old.encode(), new.encode()))
    assert message in refused(sglpatch, target, "--patches", patches)


def test_rename_out_of_the_tree(sglpatch, target, patches):
    path = touched(patches, 1)
    rename = f"similarity index 90%\nrename from {path}\nrename to ../../outside.py\n"
    edit_patch(patches, 1, lambda data: data.replace(b"\nindex ", ("\n" + rename + "index ").encode(), 1))
    err = refused(sglpatch, target, "--patches", patches)
    assert "not a plain relative path" in err, err


# -- links and modes in patches ---------------------------------------------------------

LINK = "python/sglang/srt/evil_link"


def _new_link_section(path: str, mode: str, text: str) -> bytes:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\nindex 0000000..2e65efe\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{text}\n\\ No newline at end of file\n"
    ).encode()


def _mode_change(path: str, mode: str) -> bytes:
    return f"diff --git a/{path} b/{path}\nold mode 100644\nnew mode {mode}\n".encode()


@pytest.mark.parametrize(
    "section, message",
    [
        (lambda p: _new_link_section(LINK, "120000", "/etc/passwd"), "evil_link would become a symbolic link"),
        (lambda p: _new_link_section(LINK, "120000", "../../../../outside"), "would become a symbolic link"),
        (lambda p: _mode_change(p, "120000"), "would become a symbolic link"),
        (lambda p: _mode_change(p, "100600"), "mode 100600"),
        (
            lambda p: f"diff --git a/{LINK} b/{LINK}\nnew file mode 160000\nindex 0000000..2e65efe\n--- /dev/null\n"
            f"+++ b/{LINK}\n@@ -0,0 +1 @@\n+Subproject commit 2e65efe2a145dda7ee51d1741299f848e5bf752e\n".encode(),
            "a submodule",
        ),
    ],
    ids=["link-out-absolute", "link-out-dotdot", "file-to-link", "odd-mode", "submodule"],
)
def test_patch_creating_a_link_or_odd_mode(sglpatch, target, patches, section, message):
    """A series holds regular files only (100644/100755): refused before anything is written, on both kinds."""
    edit_patch(
        patches,
        0,
        lambda data: data.replace(b"\ndiff --git ", b"\n" + section(touched(patches, 1)) + b"diff --git ", 1),
    )
    err = refused(sglpatch, target, "--patches", patches)
    assert message in err and "regular files" in err, err
    assert not (target / "srt" / "evil_link").exists() and not (target / LINK).exists()


# -- broken patch files --------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.replace(b"\n", b"\r\n"), "CRLF"),
        (lambda d: d.split(b"\n@@")[0] + b"\nGIT binary patch\nliteral 4\nabcd\n\n", "binary"),
        (lambda d: d[: len(d) * 2 // 3], "malformed patch"),
        (lambda d: d[:40], "malformed patch"),
        (lambda d: b"", "malformed patch"),
        (lambda d: d.replace(b"\n", b"\n\xff", 1), "not UTF-8"),
    ],
    ids=["crlf", "binary", "truncated", "truncated-header", "empty", "not-utf8"],
)
def test_broken_patch_file(sglpatch, target, patches, edit, message):
    edit_patch(patches, 0, edit)
    assert message in refused(sglpatch, target, "--patches", patches)


# -- the series file -----------------------------------------------------------------


@pytest.mark.parametrize(
    "make_series, message",
    [
        (lambda names: names + [names[0]], "listed twice"),
        (lambda names: names + ["0009-unknown.patch"], "0009-unknown.patch"),
        (lambda names: [f"../{names[0]}"], "not a patch file name"),
        (lambda names: [f"/tmp/{names[0]}"], "not a patch file name"),
        (lambda names: [f"sub/{names[0]}"], "not a patch file name"),
        (lambda names: ["# only a comment"], "lists no patches"),
    ],
    ids=["duplicate", "unknown", "dotdot", "absolute", "subfolder", "empty"],
)
def test_broken_series(sglpatch, target, patches, make_series, message):
    names = [p.name for p in load_series(patches).patches]
    (patches / "series").write_text("\n".join(make_series(names)) + "\n")
    assert message in refused(sglpatch, target, "--patches", patches)


def test_series_entry_that_is_a_link_out_of_the_folder(sglpatch, target, patches, tmp_path):
    first = load_series(patches).patches[0].path
    outside = tmp_path / "elsewhere.patch"
    shutil.move(first, outside)
    first.symlink_to(outside)
    assert "not a regular file" in refused(sglpatch, target, "--patches", patches)


# -- the pin -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text[: len(text) // 2],
        lambda text: text.replace('"python/sglang/', '"python/sglang/../../', 1),
        lambda text: json.dumps({**json.loads(text), "blobs": {}}),
        lambda text: text.replace('"sha256": "', '"sha256": "zz', 1),
        lambda text: "\ufeff" + text,
        lambda text: "null",
    ],
    ids=["truncated", "dotdot-blob", "no-blobs", "bad-sha256", "bom", "null"],
)
def test_corrupt_pin(sglpatch, target, patches, edit):
    pin = patches / "pin.json"
    pin.write_text(edit(pin.read_text()))
    assert "corrupt pin" in refused(sglpatch, target, "--patches", patches)


# -- links in the target ---------------------------------------------------------------


def test_package_folder_linked_out_of_the_tree(sglpatch, package, patches, tmp_path):
    """A folder on the way to a touched file is a link to somewhere else: refused, the other side untouched."""
    deepest = max(load_series(patches).touched_paths, key=lambda p: p.count("/"))
    folder = (package / deepest.removeprefix("python/sglang/")).parent
    assert folder != package
    outside = tmp_path / "outside-folder"
    shutil.move(folder, outside)
    folder.symlink_to(outside, target_is_directory=True)
    outside_before = tree_state(outside)
    assert "outside the target" in refused(sglpatch, package, "--patches", patches)
    assert tree_state(outside) == outside_before


@pytest.mark.parametrize("what", ["file", "folder"])
def test_checkout_with_committed_link_out_of_the_tree(sglpatch, checkout, patches, tmp_path, what):
    path = checkout / touched(patches, 1)
    victim = path if what == "file" else path.parent
    outside = tmp_path / f"outside-{what}"
    shutil.move(victim, outside)
    victim.symlink_to(outside, target_is_directory=what == "folder")
    Git(checkout).run("add", "-A")
    Git(checkout).run("commit", "-qm", "a link out of the tree")
    outside_before = tree_state(outside) if what == "folder" else outside.read_bytes()
    refused(sglpatch, checkout, "--patches", patches)
    assert (tree_state(outside) if what == "folder" else outside.read_bytes()) == outside_before


# -- the toolkit's own records, damaged ------------------------------------------------


@pytest.mark.parametrize("command", ["apply", "revert", "recover"])
@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_journal_or_state_file(sglpatch, request, patches, command, kind):
    target = request.getfixturevalue(kind)
    assert sglpatch("apply", "--sglang", target, "--patches", patches)[0] == 0
    record = (
        target / ".git" / "sglpatch-state.json" if (target / ".git").is_dir() else target / ".sglpatch" / "journal.json"
    )
    record.write_text(record.read_text()[:30])
    args = ["--patches", patches] if command == "apply" else []
    assert "is corrupt" in refused(sglpatch, target, *args, command=command)


@pytest.mark.parametrize(
    "state",
    [
        "{not json",
        "[]",
        '{"phase": "replaying"}',
        '{"phase": "sideways", "original": "main", "original_head": "0", "backup": "b", "onto": "0", "onto_name": "x"}',
        '{"phase": "installing", "original": "main", "original_head": "0", "backup": "b", "onto": "0",'
        ' "onto_name": "x", "patch_dir": "/p", "install": {"files": 3}}',
    ],
    ids=["not-json", "not-an-object", "missing-keys", "unknown-phase", "bad-install"],
)
@pytest.mark.parametrize(
    "command,args", [("recover", []), ("apply", []), ("rebase", ["--abort"]), ("rebase", ["--continue"])]
)
def test_corrupt_rebase_state(sglpatch, shared_targets, patches, state, command, args):
    """A damaged .git/sglpatch-rebase/state.json: every command that reads it refuses in one line, writes nothing."""
    checkout = shared_targets["checkout"]
    folder = checkout / ".git" / "sglpatch-rebase"
    folder.mkdir()
    try:
        (folder / "state.json").write_text(state)
        extra = ["--patches", patches] if command == "apply" else args
        err = refused(sglpatch, checkout, *extra, command=command)
        assert "sglpatch-rebase/state.json is corrupt" in err
    finally:
        shutil.rmtree(folder)


# -- wheels (tests/toolkit/test_default_base.py has the wrong-checksum download) --------


@pytest.fixture
def project(tmp_path, series_dir, monkeypatch):
    root = tmp_path / "project"
    shutil.copytree(series_dir, root / "patches" / "v0.5.14")
    monkeypatch.setattr("sglpatch.project.PROJECT_ROOT", root)
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a download attempt fails at once, offline
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    return root


def _pin_wheel(project, data: bytes):
    """Put `data` in the cache under the pin's wheel name, and make the pin's sha256 match it."""
    pin = json.loads((project / "patches" / "v0.5.14" / "pin.json").read_text())
    (project.parent / "cache" / "wheels" / pin["wheel"]["filename"]).write_bytes(data)
    pin["wheel"]["sha256"] = hashlib.sha256(data).hexdigest()
    (project / "patches" / "v0.5.14" / "pin.json").write_text(json.dumps(pin))


def test_tampered_cached_wheel_is_not_used(sglpatch, project, wheel_path):
    cached = project.parent / "cache" / "wheels" / wheel_path.name
    data = bytearray(wheel_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    code, _, err = sglpatch("apply")
    assert code == 2 and "could not download" in err.strip().splitlines()[-1]
    assert not (project / "build" / "sglang").exists()


def test_wheel_that_is_not_a_zip(sglpatch, project):
    _pin_wheel(project, b"not a zip at all\n" * 10)
    code, _, err = sglpatch("apply")
    assert code == 2 and "not a valid wheel" in err
    assert not (project / "build" / "sglang").exists()


@pytest.mark.parametrize("member", ["sglang/../../escaped.py", "sglang//etc/passwd"])
def test_wheel_with_member_escaping_the_tree(sglpatch, project, tmp_path, member):
    fake = tmp_path / "fake.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
        archive.writestr(member, "print('escaped')\n")
    _pin_wheel(project, fake.read_bytes())
    code, _, err = sglpatch("apply")
    assert code == 2 and "unsafe member name" in err
    assert not (project / "build" / "sglang").exists()
    assert not list(tmp_path.rglob("escaped.py"))


# -- property: damaged patches, through the CLI ----------------------------------------

HOSTILE = ["../", "/", ".git/", "\\", "\r", "\x00", "GIT binary patch", "@@ -1,3 +1,3 @@", "rename to ../x", '"']


@settings(
    max_examples=80 if FULL_GRID else 12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(
    index=st.integers(min_value=0, max_value=1),
    cut=st.floats(min_value=0, max_value=1),
    insert=st.sampled_from(HOSTILE) | st.text(max_size=8),
    mode=st.sampled_from(["truncate", "insert", "replace-line", "drop-line"]),
)
def test_damaged_patch_through_the_cli_writes_nothing_or_reverts_exactly(
    sglpatch, package, series_dir, tmp_path_factory, index, cut, insert, mode
):
    pristine = tree_state(package)
    patches = tmp_path_factory.mktemp("fuzz") / "patches"
    shutil.copytree(series_dir, patches)

    def damage(data: bytes) -> bytes:
        at = int(len(data) * cut)
        line_start = data.rfind(b"\n", 0, at) + 1
        line_end = data.find(b"\n", at) if data.find(b"\n", at) >= 0 else len(data)
        raw = insert.encode("utf-8", "surrogatepass")
        return {
            "truncate": lambda: data[:at],
            "insert": lambda: data[:at] + raw + data[at:],
            "replace-line": lambda: data[:line_start] + raw + data[line_end:],
            "drop-line": lambda: data[:line_start] + data[line_end + 1 :],
        }[mode]()

    edit_patch(patches, index, damage)
    code, out, err = sglpatch("apply", "--sglang", package, "--patches", patches)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert tree_state(package) == pristine
    else:
        code, _, err = sglpatch("revert", "--sglang", package)
        assert code == 0, err
        assert tree_state(package) == pristine
