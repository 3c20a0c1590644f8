#!/usr/bin/env bash
# On the H200 box (the `run` tool's working tree): DeepGEMM from the GPU bundle, then "$@".
#   bash bench/studies/run_sm90_single_read.sh python3 bench/studies/sm90_single_read.py --out "$OUT"
# Unpacks only sgl-deep-gemm and apache-tvm-ffi from .gpu-bundle/deps.tar.xz (carry .gpu-bundle),
# restores the bundle's JIT cache, and sets the paths the kernels' JIT needs.
set -uo pipefail
W=/tmp/sm90-single-read
mkdir -p "$W"
python3 - "$W" <<'PYEOF' || exit 3
import sys, tarfile
keep = ("site/deep_gemm", "site/tvm_ffi", "site/sgl_deep_gemm", "site/apache_tvm_ffi")
with tarfile.open(".gpu-bundle/deps.tar.xz") as t:
    t.extractall(sys.argv[1], members=[m for m in t if m.name.startswith(keep)], filter="data")
PYEOF
[ -f .gpu-bundle/jit-cache.tar.gz ] && tar -xzf .gpu-bundle/jit-cache.tar.gz -C "$W"
export PYTHONPATH="$PWD:$W/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" DG_JIT_CACHE_DIR="$W/jit/deep_gemm" TRITON_CACHE_DIR="$W/jit/triton"
python3 -c 'import torch, triton, deep_gemm, importlib.metadata as m; print("torch", torch.__version__, "triton", triton.__version__, "sgl-deep-gemm", m.version("sgl-deep-gemm"), torch.cuda.get_device_name())'
exec "$@"
