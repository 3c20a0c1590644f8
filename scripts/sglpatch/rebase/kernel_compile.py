"""DeepGEMM's SM90 paged-MQA kernel compiled for sm_90a on a machine with no GPU and no CUDA install.

nvcc and the CUDA headers come from PyPI wheels (ci/cuda-toolchain-requirements.txt, checked by pip against
their hashes), unpacked once into the cache ($SGLPATCH_CACHE/cuda-<hash of that file>/, laid out beside and
renamed into place); cute and cutlass from the line's stand-in wheel (sgl-deep-gemm, sha256 in pin.json):
a DeepGEMM checkout has them only as its third-party/cutlass submodule.

The kernel template is instantiated as DeepGEMM's host code asks its JIT for it
(csrc/jit_kernels/impls/sm90_fp8_mqa_logits.hpp at 54e2261: head_dim 128, block_kv 64, 2-D context
lengths, not varlen, 3 Q and 3 KV stages, split_kv 256, 128 TMA and 512 math threads, float logits and
weights), for each next_n and head count asked; a line's patch that makes the host code ask for other shapes
(KV stages, or bf16 weights: a last template argument) lists them in the line's SHAPES_FILE (`shapes_of`), and
every prefix from that patch on compiles them too; and compiled with the flags of its JIT's nvcc (csrc/jit/compiler.hpp: C++20, its suppressed
diagnostics, register-usage level 10, -O3, relaxed constexpr, extended lambdas) and ptxas's verbose report,
from which registers, spills and local memory are read. A kernel whose WGMMAs ptxas serializes (it injects
warpgroup.wait, note C7517) fails the check: it would run, without the overlap of tensor cores and epilogue.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.output import progress, show_path
from sglpatch.pin import Pin
from sglpatch.project import PROJECT_ROOT
from sglpatch.wheels import cache_dir, fetch_wheel, pip_download

TOOLCHAIN_REQUIREMENTS = PROJECT_ROOT / "ci" / "cuda-toolchain-requirements.txt"
TOOLKIT_FOLDER = "nvidia/cu13/"  # where the CUDA 13 wheels put their files
ARCH = "sm_90a"
HEADER = "deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh"
SHAPES_FILE = "kernel-shapes.json"
# ptxas's note (C7517) when it cannot prove a WGMMA's accumulators unused until waited for, and waits itself
WGMMA_SERIALIZED = "warpgroup.wait is injected"


@dataclass(frozen=True)
class Shape:
    """One instantiation: next_n, index heads, and the split of KV and math threads the host code picks for them."""

    next_n: int
    heads: int
    split_kv: int = 256
    math_threads: int = 512
    kv_stages: int = 3
    weights: str = "float"  # or "bf16": the kernel's weights dtype, a template argument after the logits'


# The weights dtypes a shape may name, as the host code spells them in the template's arguments
WEIGHT_TYPES = {"float": "", "bf16": ", cutlass::bfloat16_t"}
# The shapes DeepSeek-V3.2's indexer runs on SM90 at 54e2261 (the host code allows next_n 1 and 2)
SHAPES = (Shape(1, 64), Shape(2, 64))
NVCC_FLAGS = (
    "-std=c++20",
    "--diag-suppress=39,161,174,177,186,940",
    "--ptxas-options=--register-usage-level=10",
    "--ptxas-options=--verbose,--warn-on-local-memory-usage",
    f"--gpu-architecture={ARCH}",
    "--compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi",
    "-O3",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
)
_PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux2010_x86_64", "manylinux_2_12_x86_64"]


@dataclass(frozen=True)
class KernelBuild:
    next_n: int
    heads: int
    ok: bool
    seconds: float
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    error: str = ""
    weights: str = "float"

    def describe(self) -> str:
        shape = f"next_n {self.next_n}, {self.heads} heads" + (
            "" if self.weights == "float" else f", {self.weights} weights"
        )
        if not self.ok:
            return f"{shape}: does not compile ({self.error})"
        spills = f"{self.spill_stores} B spill stores, {self.spill_loads} B spill loads"
        return f"{shape}: {self.registers} registers, {spills} ({self.seconds:.1f} s)"


def kernel_source(shape: Shape) -> str:
    """A translation unit that makes nvcc build the kernel for `shape`, as DeepGEMM's JIT does."""
    n, h, split, math = shape.next_n, shape.heads, shape.split_kv, shape.math_threads
    arguments = f"{n}, {h}, 128, 64, true, false, 3, {shape.kv_stages}, {split}, 128, {math}, float"
    arguments += WEIGHT_TYPES[shape.weights]
    return (
        f"#include <{HEADER}>\n\n"
        "static void instantiate() {\n"
        f"    auto kernel = reinterpret_cast<void*>(&deep_gemm::sm90_fp8_paged_mqa_logits<{arguments}>);\n"
        "    (void)kernel;\n"
        "}\n"
    )


def cuda_home() -> Path:
    """The CUDA 13 toolkit from PyPI wheels (nvcc, cicc, ptxas, headers), unpacked once into the cache."""
    stamp = hashlib.sha256(TOOLCHAIN_REQUIREMENTS.read_bytes()).hexdigest()[:12]
    home = cache_dir() / f"cuda-{stamp}"
    if (home / "bin" / "nvcc").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    progress(f"downloading nvcc and the CUDA headers from PyPI (once; {show_path(home)})")
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".cuda-") as tmp:
        wheels = Path(tmp) / "wheels"
        what = f"the CUDA toolchain of {TOOLCHAIN_REQUIREMENTS.name}"
        pip_download(["--require-hashes", "-r", str(TOOLCHAIN_REQUIREMENTS)], wheels, "3.11", _PLATFORMS, what=what)
        staging = Path(tmp) / "cuda"
        for wheel in sorted(wheels.glob("*.whl")):
            _unpack(wheel, TOOLKIT_FOLDER, staging)
        if not (staging / "bin" / "nvcc").is_file():
            raise FatalError(f"{TOOLCHAIN_REQUIREMENTS} gave no {TOOLKIT_FOLDER}bin/nvcc")
        shutil.rmtree(home, ignore_errors=True)
        os.replace(staging, home)
    return home


def cutlass_headers(pin: Pin) -> Path:
    """An include folder holding cute/ and cutlass/ from the pin's stand-in wheel, unpacked once into the cache."""
    wheel = fetch_wheel(pin.wheel.filename.split("-")[1], pin.wheel, pin.project)
    include = cache_dir() / f"cutlass-{pin.wheel.sha256[:12]}" / "include"
    if (include / "cute").is_dir() and (include / "cutlass").is_dir():
        return include
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".cutlass-") as tmp:
        staging = Path(tmp) / "include"
        for name in ("cute", "cutlass"):
            _unpack(wheel, f"{pin.project.package}/include/{name}/", staging / name)
        include.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(include, ignore_errors=True)
        os.replace(staging, include)
    return include


def _unpack(wheel: Path, folder: str, dest: Path) -> None:
    """The wheel's members under `folder` into `dest` (that prefix dropped), executable bits kept."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.startswith(folder):
                continue
            relative = info.filename[len(folder) :]
            if any(part in ("", ".", "..") for part in relative.split("/")):
                raise FatalError(f"{wheel.name}: unsafe member name {info.filename!r}")
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            if (info.external_attr >> 16) & 0o111:
                target.chmod(0o755)


def compile_kernel(include: Path, cutlass: Path, cuda: Path, shape: Shape) -> KernelBuild:
    """nvcc on the kernel for `shape`, its headers from `include` (a tree's deep_gemm/include)."""
    next_n, heads = shape.next_n, shape.heads
    with tempfile.TemporaryDirectory(prefix="sglpatch-kernel-") as tmp:
        source = Path(tmp) / "kernel.cu"
        source.write_text(kernel_source(shape))
        command = [str(cuda / "bin" / "nvcc"), str(source), "-cubin", "-o", str(Path(tmp) / "kernel.cubin")]
        command += [*NVCC_FLAGS, f"-I{include}", f"-I{cutlass}", f"-I{cuda / 'include'}"]
        command += ["-isystem", str(cuda / "include" / "cccl")]
        started = time.monotonic()
        result = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    if result.returncode != 0:
        errors = [line.strip() for line in output.splitlines() if "error" in line.lower()]
        error = (errors or [f"nvcc exit {result.returncode}"])[0]
        return KernelBuild(next_n, heads, False, seconds, error=error, weights=shape.weights)
    if WGMMA_SERIALIZED in output:
        # ptxas waits for every WGMMA before its accumulators are touched: it compiles, but the overlap is gone
        error = f"ptxas serializes its WGMMAs ({WGMMA_SERIALIZED})"
        return KernelBuild(next_n, heads, False, seconds, error=error, weights=shape.weights)
    registers = re.search(r"Used (\d+) registers", output)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", output)
    return KernelBuild(
        next_n,
        heads,
        True,
        seconds,
        int(registers.group(1)) if registers else None,
        int(spills.group(1)) if spills else None,
        int(spills.group(2)) if spills else None,
        weights=shape.weights,
    )


def compile_tree(tree: Path, pin: Pin, shapes=SHAPES) -> list[KernelBuild]:
    """The kernel of a DeepGEMM tree (a checkout's or a stand-in's) for each shape."""
    include = tree / pin.project.package_prefix / "include"
    if not (include / HEADER).is_file():
        raise FatalError(f"{tree} has no {pin.project.package_prefix}include/{HEADER}")
    cuda, cutlass = cuda_home(), cutlass_headers(pin)
    with ThreadPoolExecutor(max_workers=min(len(shapes), os.cpu_count() or 1)) as pool:  # one nvcc a core
        return list(pool.map(lambda shape: compile_kernel(include, cutlass, cuda, shape), shapes))


def shapes_of(line_dir: Path, patch_names: list[str]) -> tuple[Shape, ...]:
    """SHAPES and those the line's SHAPES_FILE lists for any of `patch_names` (a prefix's patches): a JSON object
    from a patch's file name to a list of [next_n, heads, split_kv, math_threads(, kv_stages(, weights))]."""
    path = line_dir / SHAPES_FILE
    listed = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    try:
        added = [_shape(shape) for name in patch_names for shape in listed.get(name, [])]
    except (TypeError, ValueError) as exc:
        raise FatalError(
            f"{path}: each shape is [next_n, heads, split_kv, math_threads(, kv_stages(, weights))] ({exc})"
        ) from None
    return tuple(dict.fromkeys([*SHAPES, *added]))


def _shape(listed: list) -> Shape:
    """A SHAPES_FILE entry: four or five numbers, then optionally a weights dtype of WEIGHT_TYPES."""
    numbers, weights = (listed[:-1], listed[-1]) if len(listed) == 6 else (listed, "float")
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"weights {weights!r} not one of {', '.join(WEIGHT_TYPES)}")
    return Shape(*map(int, numbers), weights=weights)
