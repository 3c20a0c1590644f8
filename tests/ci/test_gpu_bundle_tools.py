"""CPU-only checks of the GPU-run tooling in ci/ (no GPU, no sglang needed).

python -m pytest ci/test_gpu_ci_tools.py
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from sglpatch.errors import FatalError
from sglpatch.gpu.ci_summary import kit_metadata_layouts
from sglpatch.wheels import pip_download

CI = Path(__file__).resolve().parents[2] / "ci"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_ci_{name}", CI / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


apply_series = _load("apply_series")
gpu_bundle = _load("gpu_bundle")
sys.path.insert(0, str(CI))
layouts = importlib.import_module("dsa_kit_layouts")  # the module the driver imports, not a copy


def _tree(root: Path) -> Path:
    pkg = root / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("one\ntwo\nthree\n")
    return root


PATCH = """diff --git a/python/sglang/srt/a.py b/python/sglang/srt/a.py
--- a/python/sglang/srt/a.py
+++ b/python/sglang/srt/a.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""
PATCH2 = PATCH.replace("-two\n+TWO", "-TWO\n+2")


def test_series_order_and_strip(tmp_path):
    root = _tree(tmp_path / "w")
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "b.patch").write_text(PATCH)
    (pdir / "a.patch").write_text(PATCH2)  # would fail first: series order must win
    (pdir / "series").write_text("# ordered\nb.patch\na.patch\n")
    assert [p.name for p in apply_series.list_series(str(pdir))] == ["b.patch", "a.patch"]
    assert apply_series.strip_level(pdir / "b.patch") == 2
    rc = apply_series.main([str(pdir), "--root", str(root), "--record", str(tmp_path / "r.json")])
    assert rc == 0
    assert (root / "sglang/srt/a.py").read_text() == "one\n2\nthree\n"


def test_a_patch_that_no_longer_applies_stops_and_leaves_the_file(tmp_path):
    root = _tree(tmp_path / "w")
    (tmp_path / "x.patch").write_text(PATCH)
    assert apply_series.main([str(tmp_path / "x.patch"), "--root", str(root)]) == 0
    assert (root / "sglang/srt/a.py").read_text() == "one\nTWO\nthree\n"
    with pytest.raises(SystemExit, match="git apply --check x.patch failed"):  # context no longer matches
        apply_series.main([str(tmp_path / "x.patch"), "--root", str(root)])
    assert (root / "sglang/srt/a.py").read_text() == "one\nTWO\nthree\n"


def test_none_is_pristine(tmp_path):
    assert apply_series.list_series("none") == []


def test_committed_requirements_pin_and_hash_every_wheel():
    deps = gpu_bundle.read_requirements(gpu_bundle.DEPS_REQUIREMENTS)
    sglang = gpu_bundle.read_requirements(gpu_bundle.SGLANG_REQUIREMENTS)
    versions = {gpu_bundle.norm(p["name"]): p["version"] for p in deps + sglang}
    assert len(versions) == len(deps) + len(sglang) == 43  # no wheel named twice
    assert versions["sglang"] == "0.5.14" and versions["sglang-kernel"] == "0.4.4"
    assert versions["transformers"] == "5.8.1" and versions["sgl-deep-gemm"] == "0.1.5.post1"
    assert gpu_bundle.wheel_matches("foo_bar-1.0-py3-none-any.whl", "foo.bar", "1.0")


def _tiny_wheel(folder: Path) -> Path:
    folder.mkdir()
    wheel = folder / "tiny_dep-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tiny_dep/__init__.py", "")
        archive.writestr("tiny_dep-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tiny-dep\nVersion: 1.0\n")
        archive.writestr(
            "tiny_dep-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr("tiny_dep-1.0.dist-info/RECORD", "")
    return wheel


def test_pip_itself_refuses_a_wheel_whose_hash_differs(tmp_path):
    wheel = _tiny_wheel(tmp_path / "index")
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    offline = ["--no-index", "--find-links", str(wheel.parent)]
    for digest, dest in ((good, tmp_path / "ok"), ("0" * 64, tmp_path / "refused")):
        requirements = tmp_path / f"req-{digest[:4]}.txt"
        requirements.write_text(f"tiny-dep==1.0 --hash=sha256:{digest}  # why it is here\n")
        assert gpu_bundle.read_requirements(requirements)[0]["sha256"] == digest
        arguments = [*offline, "--require-hashes", "-r", str(requirements)]
        if digest == good:
            pip_download(arguments, dest, "3.12", gpu_bundle.PLATFORMS)
            assert [p.name for p in dest.iterdir()] == [wheel.name]
        else:
            with pytest.raises(FatalError, match="could not download"):
                pip_download(arguments, dest, "3.12", gpu_bundle.PLATFORMS)
            assert not dest.exists() or not list(dest.iterdir())


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="driver helpers use torch tensors")
def test_layout_helpers():
    import torch

    class L(enum.Enum):
        PER_TOKEN = "per_token"
        NATIVE = "native"
        PAIRED = "paired"
        PAIR_TAIL = "pair_tail"  # an earlier revision's odd-next_n layout: not the series' any more

    assert [layouts.normalize_layout(v) for v in L] == ["per_token", "native", "paired", "unknown:PAIR_TAIL pair_tail"]
    assert layouts.infer_from_ctx_lens(torch.zeros(8, 1), 2, 4) == "per_token"
    assert layouts.infer_from_ctx_lens(torch.zeros(2, 4), 2, 4) == "native"
    assert layouts.infer_from_ctx_lens(torch.zeros(4, 2), 2, 4) == "paired"
    assert layouts.infer_from_ctx_lens(torch.zeros(1, 2), 1, 2) == "native"
    assert layouts.infer_from_ctx_lens(torch.zeros(4, 2), 2, 3) == "unknown:4x2"  # pairs plus a tail
    # what the series permits (SM90: per-token or the next_n's multi-token layout)
    assert layouts.allowed_layouts(2, 9, "patched") == {"per_token", "native"}
    assert layouts.allowed_layouts(3, 9, "patched") == {"per_token"}
    assert layouts.allowed_layouts(5, 9, "patched") == {"per_token"}
    assert layouts.allowed_layouts(6, 9, "patched") == {"per_token", "paired"}
    assert layouts.allowed_layouts(4, 9, "patched") == {"per_token", "paired"}
    assert layouts.allowed_layouts(4, 9, "pristine") == {"per_token"}
    assert layouts.allowed_layouts(3, 10, "pristine") == {"native"}
    assert layouts.allowed_layouts(4, 8, "patched") is None


def test_driver_collects_without_gpu():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            str(CI / "dsa_kit_driver.py"),
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
    )
    assert "test_target_verify" in out.stdout, out.stdout + out.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="driver helpers use torch tensors")
def test_target_verify_check_on_fake_kit(tmp_path, monkeypatch):
    """Exercise the TARGET_VERIFY layout check without a GPU: a fake kit plays the DSA backend
    and records what a patched tree would build; a wrong layout must fail the check."""
    import types

    import torch

    drv = _load("dsa_kit_driver")
    monkeypatch.setenv("DSA_KIT_EXPECT", "patched")
    mode = types.SimpleNamespace(name="TARGET_VERIFY")

    def make_kit(shape_for):
        class Backend:
            speculative_num_draft_tokens = 0

        def run(tc, case):
            b = Backend()
            b.speculative_num_draft_tokens = case.extend_lens[0]
            layout = shape_for(len(case.prefix_lens), case.extend_lens[0])
            rows, cols = {
                "per_token": (len(case.prefix_lens) * case.extend_lens[0], 1),
                "native": (len(case.prefix_lens), case.extend_lens[0]),
                "paired": (len(case.prefix_lens) * case.extend_lens[0] // 2, 2),
            }[layout]
            b.forward_metadata = types.SimpleNamespace(
                paged_mqa_layout=layout, paged_mqa_ctx_lens_2d=torch.zeros(rows, cols)
            )
            drv.RECORDER._note(b, mode, len(case.prefix_lens), "init_forward_metadata")

        dsa = types.SimpleNamespace(
            DSAAttentionCase=lambda **k: types.SimpleNamespace(**k), run_dsa_sparse_speculative_forward_mode_case=run
        )
        fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=lambda i: (9, 0)))
        return dict(dsa=dsa, ForwardMode=types.SimpleNamespace(TARGET_VERIFY=mode), torch=fake_torch)

    def good(bs, n):  # the next_n's two-token layout from 8 requests (the rule's floors are the CPU tests')
        allowed = layouts.allowed_layouts(n, 9, "patched")
        multi = sorted(allowed - {"per_token"})
        return multi[0] if multi and bs >= 8 else "per_token"

    request = types.SimpleNamespace(node=types.SimpleNamespace(nodeid="t", user_properties=[]))
    for prefix, n in [((1,) * 8, 2), ((1,) * 8, 3), ((1,) * 8, 4), ((1,), 2)]:
        drv.RECORDER.current = "t"
        drv.RECORDER.records.clear()
        drv._run_target_verify(make_kit(good), None, request, prefix, n)
    assert ("paged_mqa_layout_field", "per_token") in request.node.user_properties
    drv.RECORDER.records.clear()
    with pytest.raises(AssertionError):  # native next_n=4 is never allowed on SM90
        drv._run_target_verify(make_kit(lambda bs, n: "native"), None, request, (1,) * 8, 4)
    drv.RECORDER.records.clear()
    with pytest.raises(AssertionError):  # paired for an odd next_n
        drv._run_target_verify(make_kit(lambda bs, n: "paired"), None, request, (1,) * 8, 3)

    mode.is_target_verify, mode.is_draft_extend_v2 = (lambda: True), (lambda: False)  # the recorder asks

    def without_field(shape_for):  # the v0.5.23 line: no layout field, only the lengths' shape
        kit = make_kit(shape_for)
        run = kit["dsa"].run_dsa_sparse_speculative_forward_mode_case

        def run_without(tc, case):
            original = drv.RECORDER._note
            monkeypatch.setattr(drv.RECORDER, "_note", lambda b, *a: original(_drop_layout(b), *a), raising=False)
            try:
                run(tc, case)
            finally:
                monkeypatch.setattr(drv.RECORDER, "_note", original, raising=False)

        kit["dsa"].run_dsa_sparse_speculative_forward_mode_case = run_without
        return kit

    def _drop_layout(backend):
        meta = backend.forward_metadata
        backend.forward_metadata = types.SimpleNamespace(paged_mqa_ctx_lens_2d=meta.paged_mqa_ctx_lens_2d)
        return backend

    drv.RECORDER.records.clear()
    with pytest.raises(AssertionError, match="no layout field"):  # v0.5.14's patched tree must name it
        drv._run_target_verify(without_field(good), None, request, (1,) * 8, 4)
    monkeypatch.setenv("DSA_KIT_LAYOUT_FIELD", "0")
    drv.RECORDER.records.clear()
    drv._run_target_verify(without_field(good), None, request, (1,) * 8, 4)  # v0.5.23: the shape says paired
    drv.RECORDER.records.clear()
    with pytest.raises(AssertionError, match="imply"):  # and a wrong shape still fails
        drv._run_target_verify(without_field(lambda bs, n: "native"), None, request, (1,) * 8, 4)


def test_kit_metadata_layouts_reads_old_and_new_summaries():
    committed = json.loads((CI.parent / "docs" / "ci" / "dsa_kit_patched_h200.json").read_text())
    assert "layouts_seen" in committed and "metadata_layouts" not in committed  # written before the rename
    old = kit_metadata_layouts(committed)
    assert old["test_target_verify_eight_requests[bs8-next_n4]"]["field"] == ["paired"]
    assert old["test_target_verify_eight_requests[bs8-next_n4]"]["schedule_ctx_lens_shapes"] == [[16, 2]]
    renamed = dict(committed, metadata_layouts=old)
    del renamed["layouts_seen"]
    assert kit_metadata_layouts(renamed) == old


def test_a_newer_line_pins_and_hashes_its_own_wheels():
    shared = {gpu_bundle.norm(p["name"]) for p in gpu_bundle.read_requirements(gpu_bundle.DEPS_REQUIREMENTS)}
    own = gpu_bundle.read_requirements(gpu_bundle.line_requirements("v0.5.23"))
    assert [(p["name"], p["version"]) for p in own] == [
        ("xgrammar", "0.2.7"),
        ("sgl-flash-mla", "1.0.0"),
    ]  # 0.5.23's pins
    assert not shared & {gpu_bundle.norm(p["name"]) for p in own}  # never two versions of one wheel
    assert not gpu_bundle.line_requirements("v0.5.14").exists()  # v0.5.14 runs keep their packages


def _xz(path: Path, files: dict[str, str]) -> None:
    """A bundle archive as ci/gpu_bundle.py packs one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    packer = gpu_bundle.Packer(path)
    for name, text in files.items():
        packer.add(name, text.encode(), 0o644)
    packer.close()


@pytest.mark.parametrize("line", ["v0.5.14", "v0.5.23"])
def test_line_trees_get_the_line_s_own_wheels_and_only_theirs(tmp_path, line):
    bundle, work = tmp_path / "bundle", tmp_path / "work"
    backend = "sglang/srt/layers/attention/dsa_backend.py"
    _xz(bundle / "deps.tar.xz", {"site/shared_dep.py": ""})
    _xz(bundle / "sgl-kernel.tar.xz", {"pkgs/sgl_kernel/__init__.py": ""})
    _xz(bundle / "sglang.tar.xz", {f"pkgs/{backend}": "v0.5.14\n"})
    _xz(bundle / "v0.5.23" / "sglang.tar.xz", {f"pkgs/{backend}": "v0.5.23\n"})
    _xz(bundle / "v0.5.23" / "deps.tar.xz", {"site/xgrammar/__init__.py": ""})
    (tmp_path / "0001-mark.patch").write_text(
        f"diff --git a/python/{backend} b/python/{backend}\n--- a/python/{backend}\n+++ b/python/{backend}\n"
        f"@@ -1 +1 @@\n-{line}\n+{line} patched\n"
    )
    (tmp_path / "series").write_text("0001-mark.patch\n")
    script = (
        f'REPO={CI.parent}; . ci/gpu_box.sh; PY={sys.executable}; OUTDIR={tmp_path / "out"}; box_start t; '
        f'make_line_trees {bundle} {work} {line} {tmp_path / "series"} {tmp_path / "record.json"}'
    )
    run = subprocess.run(["bash", "-c", script], cwd=CI.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (work / "trees" / "pristine" / backend).read_text() == f"{line}\n"
    assert (work / "trees" / "patched" / backend).read_text() == f"{line} patched\n"
    assert (work / "site" / "shared_dep.py").exists()
    assert (work / "site" / "xgrammar").exists() == (line == "v0.5.23")


def _archive(path: Path, members: dict[str, str]) -> None:
    import io
    import tarfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:xz") as archive:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))


def _hostile_archive(path: Path, kind: str) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:xz") as archive:
        info = tarfile.TarInfo("pkgs/ok.py")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"ok\n"))
        bad = tarfile.TarInfo({"absolute": "/tmp/untar-abs", "dotdot": "pkgs/../../escaped"}.get(kind, "pkgs/bad"))
        if kind in ("symlink-out", "through-link"):
            bad.type, bad.linkname = tarfile.SYMTYPE, "../../outside"
        elif kind == "device":
            bad.type, bad.devmajor, bad.devminor = tarfile.CHRTYPE, 1, 3
        archive.addfile(bad, io.BytesIO(b"") if bad.isfile() else None)
        if kind == "through-link":
            inner = tarfile.TarInfo("pkgs/bad/written")
            inner.size = 1
            archive.addfile(inner, io.BytesIO(b"x"))


# (the Python, what it is): this one, this one as if it were older than 3.11.4, and Debian 12's own where it is
UNTAR_PYTHONS = [(sys.executable, "filter"), (sys.executable, "no filter")]
if Path("/usr/bin/python3").exists():
    UNTAR_PYTHONS.append(("/usr/bin/python3", "system"))
_AS_OLDER = (
    "import runpy, sys, tarfile; vars(tarfile).pop('data_filter', None); sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _untar(python: str, how: str, archive: Path, dest: Path) -> subprocess.CompletedProcess:
    script = [str(CI / "untar.py"), str(archive), str(dest)]
    command = [python, "-c", _AS_OLDER, *script] if how == "no filter" else [python, *script]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.parametrize("python, how", UNTAR_PYTHONS, ids=[how for _, how in UNTAR_PYTHONS])
@pytest.mark.parametrize("kind", ["good", "absolute", "dotdot", "symlink-out", "through-link", "device"])
def test_a_bundle_archive_is_unpacked_by_the_data_rules_on_any_python(tmp_path, python, how, kind):
    """Issue 48: on Debian 12's Python (3.11.2) `extractall(filter=...)` does not exist (3.11.4 on), and every
    unpack of the GPU bundle failed. ci/untar.py keeps the data filter's refusals there."""
    archive, dest = tmp_path / "a.tar.xz", tmp_path / "box" / "work"
    dest.mkdir(parents=True)
    _hostile_archive(archive, kind)
    done = _untar(python, how, archive, dest)
    if kind == "good":
        assert done.returncode == 0, done.stderr
        assert (dest / "pkgs" / "ok.py").read_text() == "ok\n" and (dest / "pkgs" / "bad").is_file()
        return
    assert done.returncode != 0 and "Traceback" not in done.stderr or how == "filter", done.stderr
    assert not (tmp_path / "outside").exists() and not (tmp_path / "box" / "escaped").exists()
    assert not Path("/tmp/untar-abs").exists() and not (dest / "pkgs" / "bad" / "written").exists()
    if how != "filter":
        assert "nothing was unpacked" in done.stderr and not (dest / "pkgs").exists(), done.stderr


@pytest.mark.parametrize("line, version", [("v0.5.14", "0.5.14"), ("v0.5.23", "0.5.23")])
def test_the_dsa_kit_runs_on_the_sglang_of_the_line_it_is_given(tmp_path, line, version):
    """Issue 36: `make dsa-kit` ran only the v0.5.14 series. With LINE= the kit's tree is that line's sglang
    (ci/gpu_box.sh unpack_line_sglang, as run_dsa_kit.sh and the engine's make_line_trees use it), on a fake
    bundle of the real layout: the shared parts, and a newer line's own sglang and wheels under BUNDLE/LINE/."""
    bundle, work = tmp_path / "bundle", tmp_path / "work"
    _archive(bundle / "deps.tar.xz", {"site/shared.py": ""})
    _archive(bundle / "sgl-kernel.tar.xz", {"pkgs/sgl_kernel/__init__.py": ""})
    _archive(bundle / "sglang.tar.xz", {"pkgs/sglang/version.py": "0.5.14"})
    _archive(bundle / "v0.5.23" / "sglang.tar.xz", {"pkgs/sglang/version.py": "0.5.23"})
    _archive(bundle / "v0.5.23" / "deps.tar.xz", {"site/tvm_ffi/__init__.py": ""})
    script = (
        f'PY={sys.executable}; say() {{ echo "$*"; }}; . {CI / "gpu_box.sh"}; mkdir -p "$2"; '
        'unpack_bundle "$1" "$2" && unpack_line_sglang "$1" "$2" "$3" "$2/pkgs/sglang" && cat "$2/pkgs/sglang/version.py"'
    )
    done = subprocess.run(["bash", "-c", script, "-", bundle, work, line], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == version
    assert (work / "site" / "tvm_ffi").exists() == (line == "v0.5.23")
    missing = subprocess.run(
        ["bash", "-c", script, "-", bundle, tmp_path / "w2", "v0.5.99"], capture_output=True, text=True
    )
    assert missing.returncode == 3 and "ci/gpu_bundle.py --line v0.5.99" in missing.stderr


def test_make_dsa_kit_takes_the_line():
    """`make dsa-kit LINE=v0.5.23` runs both halves on that line, its series for the patched one."""
    made = subprocess.run(["make", "-n", "dsa-kit", "LINE=v0.5.23"], cwd=CI.parent, capture_output=True, text=True)
    runs = [line for line in made.stdout.splitlines() if "run_dsa_kit.sh" in line]
    assert len(runs) == 2 and all("--line 'v0.5.23'" in run for run in runs), made.stdout
    assert "--patches 'patches/v0.5.23/series'" in runs[1] and "--patches none" in runs[0]
    default = subprocess.run(["make", "-n", "dsa-kit"], cwd=CI.parent, capture_output=True, text=True).stdout
    assert "--patches 'patches/v0.5.14/series'" in default and "--line 'v0.5.14'" in default, default


def _box(tmp_path: Path, commands: str) -> subprocess.CompletedProcess:
    script = (
        f'REPO={CI.parent}; . ci/gpu_box.sh; PY={sys.executable}; OUTDIR={tmp_path / "out"}; box_start t; {commands}'
    )
    return subprocess.run(["bash", "-c", script], cwd=CI.parent, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("name", "tag"), [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA B200", "gpu"), ("", "gpu")]
)
def test_result_files_are_named_after_the_card_the_box_has(tmp_path, name, tag):
    """A call for an H200 may run on an H100 (5 Dec 2026): the engine runner's JSON was engine_h200.json there."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\n[ -n '{name}' ] && echo '{name}'\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    run = _box(tmp_path, f"PATH={bin_}:$PATH; card_tag")
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == tag, run.stdout + run.stderr


def test_the_series_tests_in_sglangs_tree_are_found_and_can_import_test_utils(tmp_path):
    root = tmp_path / "patched"
    for name in ("attention/unittests/dsa/test_b.py", "attention/unittests/dsa/test_a.py", "kits/helper.py"):
        (root / "test" / "registered" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "test" / "registered" / name).write_text("")
    (root / "sglang").mkdir()
    run = _box(
        tmp_path,
        f"series_sglang_tests {root}; echo ---; series_sglang_tests {root} 'test_b*'; "
        f"sglang_test_shims {tmp_path / 'shims'}",
    )
    assert run.returncode == 0, run.stderr
    every, matching = run.stdout.split("---\n")
    assert [line for line in every.splitlines() if line.startswith("test/")] == [
        "test/registered/attention/unittests/dsa/test_a.py",
        "test/registered/attention/unittests/dsa/test_b.py",
    ]
    assert [line for line in matching.splitlines() if line.startswith("test/")] == [
        "test/registered/attention/unittests/dsa/test_b.py"
    ]
    # sglang.test.test_utils imports datasets.load_dataset: importable here, whether or not it is installed
    probe = subprocess.run(
        [sys.executable, "-c", "from datasets import load_dataset"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "shims")},
        capture_output=True,
    )
    assert probe.returncode == 0, probe.stderr


def test_engine_runner_takes_the_sglang_tests_options(tmp_path):
    script = CI / "run_engine_gpu.sh"
    args = ["--bundle", str(tmp_path / "no-bundle"), "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")]
    # past the options, the missing bundle stops it (exit 3)
    run = subprocess.run(
        ["bash", str(script), *args, "--sglang-tests", "test_*.py", "--sglang-tests-s", "30", "--aa-only"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 3 and "missing" in run.stderr, run.stderr
    run = subprocess.run(["bash", str(script), *args, "--sglang-testz"], capture_output=True, text=True)
    assert run.returncode == 2 and "unknown argument: --sglang-testz" in run.stderr


def test_the_series_test_in_sglangs_tree_runs_against_the_patched_tree(tmp_path):
    """What ci/run_engine_gpu.sh --sglang-tests does, on a CPU: a bundle holding a one-file sglang, a
    series that changes it and adds a test to sglang's tree; the test runs against the patched package."""
    bundle, work = tmp_path / "bundle", tmp_path / "w"
    _xz(bundle / "deps.tar.xz", {"site/shared_dep.py": ""})
    _xz(bundle / "sgl-kernel.tar.xz", {"pkgs/sgl_kernel/__init__.py": ""})
    _xz(bundle / "sglang.tar.xz", {"pkgs/sglang/__init__.py": "PATCHED = False\n"})
    test = "test/registered/attention/unittests/dsa/test_series_probe.py"
    lines = ["import sglang", "", "", "def test_runs_against_the_patched_tree():", "    assert sglang.PATCHED"]
    (tmp_path / "0001-probe.patch").write_text(
        "diff --git a/python/sglang/__init__.py b/python/sglang/__init__.py\n"
        "--- a/python/sglang/__init__.py\n+++ b/python/sglang/__init__.py\n"
        "@@ -1 +1 @@\n-PATCHED = False\n+PATCHED = True\n"
        f"diff --git a/{test} b/{test}\nnew file mode 100644\n--- /dev/null\n+++ b/{test}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    )
    (tmp_path / "series").write_text("0001-probe.patch\n")
    run = _box(
        tmp_path,
        f"make_line_trees {bundle} {work} v0.5.14 {tmp_path / 'series'} {tmp_path / 'record.json'} && "
        f"mapfile -t T < <(series_sglang_tests {work}/trees/patched 'test_series*') && "
        f'cd {work}/trees/patched && PYTHONPATH=. {sys.executable} -m pytest -q -p no:cacheprovider "${{T[@]}}"',
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


@pytest.mark.parametrize("saved", ["jit-cache.tar.gz", "jit-cache.tar.xz"])
def test_jit_caches_outlive_the_work_folder_and_are_saved_from_where_they_live(tmp_path, saved):
    """The JIT caches sit outside WORK (which make_line_trees wipes on every run), so a second call on a
    box still warm finds what the first compiled; a bundle's saved cache is restored there, as saved or
    recompressed with xz, and save_jit_cache packs that folder."""
    import io
    import tarfile

    bundle, work, root, out = tmp_path / "bundle", tmp_path / "work", tmp_path / "jit-root", tmp_path / "out"
    bundle.mkdir()
    out.mkdir()
    with tarfile.open(bundle / saved, "w:" + saved.rsplit(".", 1)[1]) as archive:
        info = tarfile.TarInfo("jit/deep_gemm/kernel.cubin")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    env = f"SGLPATCH_JIT_ROOT={root}"
    first = _box(
        tmp_path,
        f'{env}; use_bundle_env {bundle} {work}; echo "$JIT $SGLANG_JIT_CACHE_DIR"; '
        f'mkdir -p "$SGLANG_JIT_CACHE_DIR" && echo so > "$SGLANG_JIT_CACHE_DIR/built.so"',
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[-2:] == [f"{root}/jit", f"{root}/jit/sglang-jit"]
    # the next call: WORK rebuilt, no cache carried; what was compiled is still there, and is saved
    assert "restored JIT caches" in first.stdout
    (bundle / saved).unlink()
    second = _box(tmp_path, f"{env}; rm -rf {work}; use_bundle_env {bundle} {work}; save_jit_cache {out}")
    assert second.returncode == 0, second.stderr
    assert "already on this box" in second.stdout
    with tarfile.open(out / "jit-cache.tar.gz") as saved:
        assert {"jit/deep_gemm/kernel.cubin", "jit/sglang-jit/built.so"} <= set(saved.getnames())


def test_an_archive_is_unpacked_from_a_child_shell_of_a_runner(tmp_path):
    """run_gpu_layouts.sh runs its parts in `bash -c` children with the functions exported; extract_archive
    there found no untar.py (the H200 run of 4 Dec 2026: `can't open file './untar.py'`, unpack exit 3)."""
    archive = tmp_path / "deps.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo("site/pkg/__init__.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
    script = (
        f'PY={sys.executable}; . {CI / "gpu_box.sh"}; export -f extract_archive; export PY; cd {tmp_path}; '
        f'bash -c \'extract_archive "$1" "$2"\' _ {archive} {tmp_path / "work"}'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "site" / "pkg" / "__init__.py").read_bytes() == b"x=1"
