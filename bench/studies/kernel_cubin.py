"""One shape of the SM90 paged-MQA kernel compiled to a kept cubin, with the flags of the project's compile check.

`sglpatch check-patches` compiles in a temporary folder and keeps only ptxas's report; the SASS counts of
`sass_loop_counts.py` need the cubin. The toolchain and cute/cutlass come from the check's cache (run the check
once first).

    PYTHONPATH=scripts python bench/studies/kernel_cubin.py TREE OUT 4,64,128,512,3,bf16
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from sglpatch.rebase.kernel_compile import NVCC_FLAGS, WGMMA_SERIALIZED, Shape, cuda_home, kernel_source
from sglpatch.wheels import cache_dir


def shape_of(spec: str) -> Shape:
    """next_n,heads,split_kv,math_threads,kv_stages,weights (float or bf16)."""
    *numbers, weights = spec.split(",")
    return Shape(*map(int, numbers), weights=weights)


def compile_cubin(tree: Path, out: Path, shape: Shape) -> Path:
    cuda = cuda_home()
    cutlass = sorted(cache_dir().glob("cutlass-*/include"))[-1]
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"n{shape.next_n}_h{shape.heads}_{shape.weights}"
    stem.with_suffix(".cu").write_text(kernel_source(shape))
    command = [
        str(cuda / "bin" / "nvcc"),
        str(stem.with_suffix(".cu")),
        "-cubin",
        "-o",
        str(stem.with_suffix(".cubin")),
    ]
    command += [*NVCC_FLAGS, f"-I{tree}/deep_gemm/include", f"-I{cutlass}", f"-I{cuda / 'include'}"]
    command += ["-isystem", str(cuda / "include" / "cccl")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    report = result.stdout + result.stderr
    if result.returncode != 0 or WGMMA_SERIALIZED in report:
        sys.exit(f"{stem.name}: nvcc exit {result.returncode}\n{report}")
    print(stem.name, *(line.strip() for line in report.splitlines() if "Used" in line or "spill" in line))
    return stem.with_suffix(".cubin")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", type=Path, help="a DeepGEMM tree (its deep_gemm/include)")
    parser.add_argument("out", type=Path)
    parser.add_argument("shapes", nargs="+", help="next_n,heads,split_kv,math_threads,kv_stages,weights")
    args = parser.parse_args(argv)
    for spec in args.shapes:  # one nvcc at a time
        compile_cubin(args.tree, args.out, shape_of(spec))


if __name__ == "__main__":
    main()
