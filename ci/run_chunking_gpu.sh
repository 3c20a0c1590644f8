#!/usr/bin/env bash
# The calls sglang 0.5.23's engine makes to DeepGEMM's SM90 paged-MQA kernel, one call against the chunks
# (bench/paged_mqa_chunking.py --engine --padded), on the GPU box, with the DeepGEMM it is asked for: by default
# the source build of the bundle's deep_gemm/ part (ci/build_deep_gemm.sh, reused when the box or the bundle
# has it). Needs the box's torch and nvcc and the bundle's deep_gemm/ part only (no sglang). Run from the
# repository root.
#
#   bash ci/run_chunking_gpu.sh [--out DIR] [--bundle DIR] [--deep-gemm source|wheel] [--deadline-s S]
#                               [-- CHUNKING ARGS]
#
# Writes OUT/paged_mqa_engine_calls_CARD.json (CARD h200 or h100, from the run's device; the build's deep_gemm
# record stamped in) and OUT/deep_gemm_build.json.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
box_defaults run_chunking_gpu.sh "$@"
WORK=/tmp/sglpatch-chunking
DEADLINE=200
DEEP_GEMM="${DEEP_GEMM:-source}"
BOX_OPTIONS="--deadline-s=DEADLINE"
box_options "$@"
set -- "${BOX_REST[@]}"
box_start run-chunking-gpu
[ "$DEEP_GEMM" = wheel ] && { unpack_bundle "$BUNDLE" "$WORK"; }
use_bundle_env "$BUNDLE" "$WORK"
say "deep_gemm: $("$PY" -c 'import deep_gemm; print(deep_gemm.__file__)')"
cd "$REPO" && "$PY" bench/paged_mqa_chunking.py --engine --padded --out "$OUTDIR" --deadline-s "$DEADLINE" "$@"
rc=$?
say "chunking bench exit $rc"
exit $rc
