"""ci/run_read_once_kernel.sh --source BUNDLE: the DeepGEMM part `ci/gpu_bundle.py --deep-gemm ... --deep-gemm-patches 0`
writes is what the kernel call builds from, unpacked and patched as a TAR source was (``--unpack-only``, no GPU):
the bundle made here by the bundle's own packing code from a real git repository and wheel-shaped zips."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from sglpatch.git import Git

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "ci"
HEADER = "deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh"
IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _load(name: str):
    sys.path.insert(0, str(CI))
    try:
        spec = importlib.util.spec_from_file_location(f"_ci_{name}", CI / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(CI))


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *IDENTITY, *args], check=True, capture_output=True, text=True).stdout


def _deep_gemm_repo(path: Path) -> Path:
    """A DeepGEMM-shaped repository at its pin, and the kernel patch of a line on it (git format-patch)."""
    (path / "csrc").mkdir(parents=True)
    (path / "csrc" / "python_api.cpp").write_text("// api\n")
    (path / HEADER).parent.mkdir(parents=True)
    (path / HEADER).write_text("// the pinned kernel\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "pin")
    (path / HEADER).write_text("// the pinned kernel\n// read once\n")
    _git(path, "commit", "-qam", "kernel")
    patches = path.parent / "patches"
    _git(path, "format-patch", "-q", "-1", "-o", str(patches))
    _git(path, "reset", "-q", "--hard", "HEAD~1")
    return patches


def _wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def _bundle(tmp_path: Path) -> tuple[Path, Path]:
    gpu_bundle, deep_gemm_bundle = _load("gpu_bundle"), _load("deep_gemm_bundle")
    patches = _deep_gemm_repo(tmp_path / "DeepGEMM")
    stand_in = _wheel(
        tmp_path / "sgl_deep_gemm.whl",
        {
            "deep_gemm/include/cute/tensor.hpp": "// cute\n",
            "deep_gemm/include/cutlass/cutlass.h": "// cutlass\n",
            **{h: "// the wheel's\n" for h in deep_gemm_bundle.SM90_HEADERS},
        },
    )
    fmt = _wheel(tmp_path / "cmeel_fmt.whl", {"cmeel.prefix/include/fmt/core.h": "// fmt\n"})
    bundle = tmp_path / "dg" / "deep_gemm"
    bundle.mkdir(parents=True)
    source = gpu_bundle.Packer(bundle / "source.tar.xz")
    deep_gemm_bundle.pack_source(Git(tmp_path / "DeepGEMM"), "main", source)
    source.close()
    third_party = gpu_bundle.Packer(bundle / "third-party.tar.xz")
    deep_gemm_bundle.pack_third_party(stand_in, fmt, third_party)
    third_party.close()
    return bundle, patches


def test_the_kernel_call_unpacks_a_bundle_and_patches_the_line_only(tmp_path):
    bundle, patches = _bundle(tmp_path)
    work = tmp_path / "work"
    env = {**os.environ, "READ_ONCE_WORK": str(work), "OUT": str(tmp_path / "out")}
    run = subprocess.run(
        [
            "bash",
            str(CI / "run_read_once_kernel.sh"),
            "--source",
            str(bundle),
            "--patches",
            str(patches),
            "--unpack-only",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    stock, line = work / "stock" / "DeepGEMM", work / "line" / "DeepGEMM"
    assert (stock / HEADER).read_text() == "// the pinned kernel\n"
    assert (line / HEADER).read_text() == "// the pinned kernel\n// read once\n"
    for tree in (stock, line):  # the submodules' headers where the build looks for them
        assert (tree / "deep_gemm/include/cute/tensor.hpp").read_text() == "// cute\n"
        assert (tree / "third-party/fmt/include/fmt/core.h").read_text() == "// fmt\n"
        assert not (tree / "wheel-headers").exists()
    headers = work / "bundle-headers" / "wheel-headers"
    assert (headers / HEADER).read_text() == "// the wheel's\n"
    assert f"wheel headers: {headers}" in run.stdout


def test_a_source_that_is_neither_tar_nor_bundle_is_refused(tmp_path):
    run = subprocess.run(
        ["bash", str(CI / "run_read_once_kernel.sh"), "--source", str(tmp_path), "--patches", str(tmp_path)],
        env={**os.environ, "READ_ONCE_WORK": str(tmp_path / "w"), "OUT": str(tmp_path / "out")},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "--source TAR|BUNDLE" in run.stderr
