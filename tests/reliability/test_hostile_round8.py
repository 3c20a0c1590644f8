"""The hostile trial of round 8: what the commands that write outside a target write over (`export`'s series
folder, `ci/gpu_bundle.py --out`), and what round 7 left untried (docs/reliability.md, round 8).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglpatch.git import Git
from sglpatch.series import load_series
from testing.sglang_trees import SECOND, as_tester, one_patch_series, upstream_branches
from testing.tree_bytes import refused, tree_state

ROOT = Path(__file__).resolve().parents[2]


def _gpu_bundle(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, ROOT / "ci" / "gpu_bundle.py", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("what", ["notes", "a series line"])
def test_gpu_bundle_does_not_delete_a_patches_folder_of_the_users_at_out(tmp_path, what):
    """Before: staging the patches began with `shutil.rmtree(OUT/patches)`, whatever was there: `--out` naming
    a project of the user's (or this repository's root, `--out .`) deleted its `patches/` folder, every file in
    it. Now only a folder a previous run staged (`series` and the files it lists) is replaced."""
    mine = tmp_path / "project" / "patches"
    mine.mkdir(parents=True)
    if what == "notes":
        (mine / "notes.txt").write_text("my notes\n")
        (mine / "0001-mine.patch").write_text("my own patch\n")
    else:
        (mine / "v0.5.14").mkdir()
        (mine / "v0.5.14" / "series").write_text("0001-a.patch\n")
    before = tree_state(tmp_path / "project")
    run = _gpu_bundle("--out", str(tmp_path / "project"), "--patches-only")
    assert run.returncode != 0 and run.stderr.count("\n") == 1, run.stderr
    assert f"{mine} is not a patches folder" in run.stderr and "nothing was changed" in run.stderr, run.stderr
    assert tree_state(tmp_path / "project") == before


def test_gpu_bundle_restages_its_own_patches_folder(tmp_path):
    """The guard above leaves a staged folder to the script: a second run replaces it."""
    out = tmp_path / "bundle"
    for _ in range(2):
        run = _gpu_bundle("--out", str(out), "--patches-only")
        assert run.returncode == 0, run.stderr
    staged = sorted(p.name for p in (out / "patches").iterdir())
    assert staged == sorted(["series", *(out / "patches" / "series").read_text().split()])


EXPORTED = (
    "[Spec] Mark the global config for an export\n\nWhy: an export to check.\n\nWhat: one comment.\n\n"
    "Drop when: never; a test.\n\nUpstream-PR: 1\nPatch-Group: export-test\nDrop-When: never\n"
)


@pytest.fixture
def exported(tmp_path, base_repo, project_pin):
    """A one-patch series folder as export wrote it, and its commits (the clone `dev` beside it)."""
    return one_patch_series(
        base_repo,
        project_pin,
        tmp_path / "patches",
        EXPORTED,
        (SECOND, "class GlobalConfig:", "# x\nclass GlobalConfig:"),
    )


def _hand_edited(folder: Path) -> None:
    patch = next(folder.glob("0001-*.patch"))
    patch.write_bytes(patch.read_bytes().replace(b"an export to check", b"a reason I wrote in the patch file"))


def _added_and_listed(folder: Path) -> None:
    """The user's own patch beside the exported one, listed in `series` (SHA256SUMS left as export wrote it)."""
    first = next(folder.glob("0001-*.patch"))
    (folder / "0002-mine.patch").write_bytes(first.read_bytes().replace(b"Mark the global config", b"My own"))
    with (folder / "series").open("a") as series:
        series.write("0002-mine.patch\n")


@pytest.mark.parametrize("change", [_hand_edited, _added_and_listed])
def test_export_does_not_write_over_or_remove_a_patch_file_the_user_changed(sglpatch, tmp_path, exported, change):
    """Before: export replaced every patch its folder's `series` listed and removed the listed ones its commits
    no longer hold, whatever their bytes: an edit made in the patch file, or a patch the user added to the
    series by hand (neither in the commits), was gone, exit 0. Now a listed patch whose bytes are not what
    SHA256SUMS records (what export or a rebase wrote) is refused in one line, before anything is written."""
    change(exported)
    before = tree_state(exported)
    code, out, err = sglpatch("export", "--from", tmp_path / "dev", "--line", "v0.5.14", "--patches", exported)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "is not what SHA256SUMS records" in err and "nothing was written" in err, err
    assert tree_state(exported) == before


def test_export_replaces_the_patches_it_wrote(sglpatch, tmp_path, exported):
    """The guard above leaves export's own patches to it: a reworded commit replaces the patch file of the
    old name, and a patch file already holding the new bytes is no edit."""
    dev = as_tester(Git(tmp_path / "dev"))
    old = [p.name for p in load_series(exported).patches]
    dev.run("commit", "-q", "--amend", "-m", EXPORTED.replace("[Spec] Mark", "[Spec] Now mark"))
    for _ in range(2):
        code, out, err = sglpatch("export", "--from", dev.workdir, "--line", "v0.5.14", "--patches", exported)
        assert code == 0, err
    assert not (exported / old[0]).exists() and len(load_series(exported).patches) == 1


@pytest.fixture
def immutable(checkout):
    """`chattr +i` on files of the checkout (root cannot write them either), lifted after the test."""
    made = []

    def set_flag(path: str) -> None:
        subprocess.run(["chattr", "+i", checkout / path], check=True)
        made.append(checkout / path)

    yield set_flag
    for path in made:
        subprocess.run(["chattr", "-i", path], check=True)


@pytest.mark.parametrize("locked", ["a file only upstream changes", "a file the series changes"])
def test_a_rebase_does_not_go_on_from_a_checkout_of_onto_git_could_not_write(
    sglpatch, checkout, patches, tmp_path, immutable, locked
):
    """An immutable file (`chattr +i`) that ONTO changes: git's `checkout --detach ONTO` says "unable to unlink
    old" and exits 0, the file left as it was. Before: the rebase went on from there. With a file only upstream
    changes it said "rebased onto up", exit 0, the work tree holding a reversal of upstream's change (git status
    " M", and `revert` blamed "your local changes"); with a file of the series, it stopped at that patch, and
    --abort called the file an edit of the user's. Now the checkout is checked: refused in one line, rolled
    back, the tree as it was."""
    git = as_tester(Git(checkout))
    git.run("switch", "-q", "-c", "up")
    version = checkout / "python/sglang/version.py"
    version.write_text(version.read_text() + "# upstream\n")
    git.run("commit", "-q", "-am", "upstream edits a file no patch touches")
    git.run("switch", "-q", "main")
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    immutable("python/sglang/version.py" if locked == "a file only upstream changes" else SECOND)
    rebase = ["--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report", "--onto", "up"]
    err = refused(sglpatch, checkout, *rebase, command="rebase")
    assert "could not check out up" in err and "the rebase was rolled back" in err, err


def _deep_gemm_bundle():
    """ci/deep_gemm_bundle.py, loaded by path (it imports its neighbours from ci/)."""
    sys.path.insert(0, str(ROOT / "ci"))
    try:
        spec = importlib.util.spec_from_file_location("_ci_deep_gemm_bundle_r8", ROOT / "ci" / "deep_gemm_bundle.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "ci"))


@pytest.mark.parametrize("first", [None, 1])
def test_the_deep_gemm_bundle_does_not_pack_a_commit_of_the_users_as_the_line(tmp_path, first):
    """A commit of the user's on the series branch of the DeepGEMM base (`build/deep_gemm-*`, where apply says
    "already applied"). Before: the bundle packed the branch's tip, the user's commit with it, as the line
    (its manifest listing the line's patches alone), and `--deep-gemm-patches N` counted back from that tip: N=1
    (the pinned kernel code, a benchmark's baseline) packed the line's kernel patch too. Now refused."""
    repo = tmp_path / "dg"
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    for text in ("pin", "build patch", "kernel patch", "a tweak of the user's"):
        (repo / "kernel.cuh").write_text(text + "\n")
        subprocess.run(["git", "-C", repo, "add", "-A"], check=True)
        subprocess.run(
            ["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text], check=True
        )
    git = Git(repo)
    pin = git.run("rev-list", "--max-parents=0", "HEAD")
    with pytest.raises(SystemExit, match="holds 1 commit past the line's 2 patches"):
        _deep_gemm_bundle().series_prefix(git, "main", ["0001-build.patch", "0002-kernel.patch"], first, pin)


@pytest.mark.parametrize("part", [[], ["--line", "v0.5.23"], ["--deep-gemm"]])
def test_gpu_bundle_does_not_replace_a_manifest_of_the_users_at_out(tmp_path, part):
    """A MANIFEST.json of the user's where the run writes its own (OUT, OUT/<line>, OUT/deep_gemm). Before: the
    whole bundle's run deleted it once the wheels were in, and every part wrote its own over it. Now refused in
    one line before any download or write (pip's index is off here: a run that went on would fail in pip)."""
    folder = tmp_path / "mine" / {"--line": "v0.5.23", "--deep-gemm": "deep_gemm"}.get(part[0] if part else "", "")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "MANIFEST.json").write_text('{"project": "my own"}\n')
    before = tree_state(tmp_path / "mine")
    run = subprocess.run(
        [sys.executable, ROOT / "ci" / "gpu_bundle.py", "--out", tmp_path / "mine", "--cache", tmp_path / "c", *part],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PIP_NO_INDEX": "1", "SGLPATCH_CACHE": str(tmp_path / "sglpatch-cache")},
    )
    assert run.returncode != 0 and f"{folder / 'MANIFEST.json'} is not a manifest" in run.stderr, run.stderr
    assert tree_state(tmp_path / "mine") == before and not (tmp_path / "c").exists()


def test_the_engine_model_script_does_not_write_over_a_models_config(tmp_path):
    """`bench/engine_model.py --out DIR` with DIR a real model's folder (its config.json, its weights). Before:
    the dummy DSA config was written over the model's config.json, exit 0. Now refused; its own folder (the
    same config again) is written as before."""
    model = tmp_path / "DeepSeek-V3.2"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["DeepseekV32ForCausalLM"], "mine": true}\n')
    before = tree_state(model)
    script = [sys.executable, ROOT / "bench" / "engine_model.py", "--out"]
    run = subprocess.run([*script, model], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and run.stderr.count("\n") == 1, run.stderr
    assert "is not the config this script writes" in run.stderr and "nothing was changed" in run.stderr
    assert tree_state(model) == before
    for _ in range(2):
        assert subprocess.run([*script, tmp_path / "dummy"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("runner", ["run_gpu_layouts.sh", "run_dsa_kit.sh", "run_engine_gpu.sh", "run_indexer_gpu.sh"])
def test_a_gpu_runner_does_not_delete_a_folder_of_the_users_named_by_work(tmp_path, runner):
    """`--work DIR` of the GPU runners (scratch for the unpacked trees). Before: each began with `rm -rf DIR`
    (run_gpu_layouts.sh and run_dsa_kit.sh themselves, the others through gpu_box.sh's make_line_trees), so a
    folder of the user's named there was deleted with all it held. Now only a folder a runner made (its
    .sglpatch-work mark), an empty one, or the runner's own default is emptied; another is refused, exit 2.
    (No bundle here: a runner that went on stops at unpacking it.)"""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    before = tree_state(mine)
    run = subprocess.run(
        ["bash", ROOT / "ci" / runner, "--out", tmp_path / "out", "--work", mine, "--bundle", tmp_path / "none"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and f"{mine} is not a work folder a runner made" in run.stdout + run.stderr, run
    assert tree_state(mine) == before
    (mine / "notes.txt").unlink()  # an empty folder is scratch: the runner goes on (and stops at the bundle)
    run = subprocess.run(
        ["bash", ROOT / "ci" / runner, "--out", tmp_path / "out", "--work", mine, "--bundle", tmp_path / "none"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "is not a work folder" not in run.stdout + run.stderr and (mine / ".sglpatch-work").exists()


def test_a_rebase_under_a_clean_filter_that_changes_a_base_file_is_rolled_back(sglpatch, checkout, patches, tmp_path):
    """Round 6's clean filter (a formatter: under it global_config.py is not as committed once git rewrites it).
    Before the check above: the rebase onto a branch whose edit conflicts stopped at the conflict with that file
    listed as changed beside it, and --abort refused, calling it an edit of the user's. Now rolled back at once,
    byte for byte."""
    upstream_branches(checkout)
    assert sglpatch("apply", "--sglang", checkout, "--patches", patches)[0] == 0
    git = Git(checkout)
    settled = time.time() - 60
    os.utime(checkout / SECOND, (settled, settled))
    git.run("update-index", "--refresh")
    (checkout / ".git" / "info" / "attributes").write_text("*.py filter=tidy\n")
    git.run("config", "filter.tidy.smudge", "cat")
    git.run("config", "filter.tidy.clean", "sed 's/^class GlobalConfig/class  GlobalConfig/'")
    rebase = ["--sglang", checkout, "--patches", patches, "--report-dir", tmp_path / "report", "--onto", "newer"]
    err = refused(sglpatch, checkout, *rebase, command="rebase")
    assert f"could not check out newer (git left {SECOND} not as committed" in err, err
