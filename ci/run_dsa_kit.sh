#!/usr/bin/env bash
# Run sglang's DSA attention test kit on an air-gapped GPU box from the bundle made by
# ci/gpu_bundle.py.  Run from the repository root (the `run` tool's working directory).
#
#   bash ci/run_dsa_kit.sh [--line LINE] [--patches SRC|none] [--label NAME] [--out DIR] [--bundle DIR]
#                          [--work DIR] [--save-jit-cache] [-- PYTEST ARGS]
#
#   --line LINE     the sglang of that series line (default v0.5.14, the bundle's own; a newer line's
#                   from BUNDLE/LINE/, made by ci/gpu_bundle.py --line LINE)
#   --patches SRC   folder with a `series` file, folder of *.patch, or a series file;
#                   `none` (default) runs the line's pristine tree
#   --label NAME    names the outputs: dsa_kit_NAME.xml / dsa_kit_NAME.json (default: pristine
#                   or patched)
#   --out DIR       where junit + summary go (default: $OUT if set, else .gpu-bundle/results)
#   --bundle DIR    the bundle folder (default .gpu-bundle)
#   --work DIR      scratch folder for the unpacked tree (default /tmp/dsa-kit)
#   --save-jit-cache  pack the JIT caches (DeepGEMM, Triton, inductor, tvm-ffi) to
#                   DIR/jit-cache.tar.gz; a later run restores BUNDLE/jit-cache.tar.gz if present
#
# Needs on the box: python3 with torch (CUDA), pytest, nvcc under CUDA_HOME; git or patch for
# the series (the series refuses to apply when neither exists).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
INVOCATION="bash ci/run_dsa_kit.sh $*"
BUNDLE="$REPO/.gpu-bundle"
PATCHES=none
LINE=v0.5.14
LABEL=""
OUTDIR="${OUT:-$REPO/.gpu-bundle/results}"
WORK=/tmp/dsa-kit
SAVE_JIT=0
PY="${PYTHON:-python3}"
BOX_OPTIONS="--line=LINE --patches=PATCHES --label=LABEL"
box_options "$@"
set -- "${BOX_REST[@]}"
if [ -z "$LABEL" ]; then
  if [ "$PATCHES" = none ]; then LABEL=pristine; else LABEL=patched; fi
fi
box_start run-dsa-kit
say "git: $(command -v git || echo none); patch: $(command -v patch || echo none)"
say "nvcc: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | tail -1 || echo missing)"

# 1. unpack the bundle ------------------------------------------------------------------
fresh_work "$WORK"
unpack_bundle "$BUNDLE" "$WORK"
unpack_line_sglang "$BUNDLE" "$WORK" "$LINE" "$WORK/pkgs/sglang"
say "unpacked bundle into $WORK, sglang of line $LINE ($(du -sh "$WORK" | cut -f1))"

# 2. patch series -----------------------------------------------------------------------
"$PY" "$REPO/ci/apply_series.py" "$PATCHES" --root "$WORK/pkgs" --record "$WORK/applied.json" \
  || { echo "patch series did not apply" >&2; exit 4; }

# 3. environment --------------------------------------------------------------------------
use_bundle_env "$BUNDLE" "$WORK"
# only the v0.5.14 line names the TARGET_VERIFY layout in a metadata field (its patch 0001); the driver
# asserts that field on a patched tree of it, and the layout from the 2D lengths' shape on every line
[ "$LINE" = v0.5.14 ] && export DSA_KIT_LAYOUT_FIELD=1 || export DSA_KIT_LAYOUT_FIELD=0
# 0.5.23's sglang.test.test_utils (the draft-runner case imports it) imports Hugging Face datasets, which
# the box lacks: the stand-ins, last on the path (the H200, 4 Dec 2026: the one failure of 23 kit cases)
sglang_test_shims "$WORK/shims"
export PYTHONPATH="$PYTHONPATH:$WORK/shims"
"$PY" - <<'EOF' || SMOKE_FAILED=1
import importlib, time, traceback
t = time.time()
for m in ("torch", "deep_gemm", "sgl_kernel", "flashinfer", "transformers", "sglang",
          "sglang.srt.layers.attention.dsa_backend",
          "sglang.test.kits.attention_unittest.attention_methods.dsa_attention"):
    mod = importlib.import_module(m)
    print(f"  import {m:<66} ok  {getattr(mod, '__file__', '')}")
print(f"  imports took {time.time() - t:.1f} s")
EOF
if [ "${SMOKE_FAILED:-0}" = 1 ]; then
  # Diagnostics only: import again with every missing top-level module stubbed, to list all
  # that are missing in one go (the kit run below still uses the real, failing environment).
  "$PY" - <<'EOF'
import importlib, importlib.abc, importlib.machinery, sys, types
missing = []
class Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda *a, **k: None, "__call__": lambda *a, **k: None})
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if "." in name:
            if name.split(".")[0] in missing:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None
        if name.startswith("_w") or name == "msvcrt":
            return None
        for f in sys.meta_path:
            if f is self:
                continue
            try:
                if f.find_spec(name, path, target) is not None:
                    return None
            except Exception:
                pass
        missing.append(name)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = Stub(spec.name); m.__path__ = []; return m
    def exec_module(self, module):
        pass
sys.meta_path.append(Finder())
try:
    importlib.import_module("sglang.test.kits.attention_unittest.attention_methods.dsa_attention")
    importlib.import_module("sglang.test.kits.attention_unittest.runner_modes.speculative_draft_runner")
except Exception as exc:
    print("  diagnostic import stopped at:", repr(exc)[:300])
print("  MISSING top-level modules:", sorted(set(missing)))
EOF
fi

# 4. the kit --------------------------------------------------------------------------------
say "running the DSA kit ($LABEL)"
"$PY" "$REPO/ci/dsa_kit_driver.py" \
  --junit "$OUTDIR/dsa_kit_${LABEL}.xml" --summary "$OUTDIR/dsa_kit_${LABEL}.json" \
  --label "$LABEL" --command "$INVOCATION" --patches-record "$WORK/applied.json" -- "$@"
rc=$?
say "kit finished, pytest exit $rc"

# 5. JIT caches for the next box -------------------------------------------------------------
if [ "$SAVE_JIT" = 1 ]; then
  save_jit_cache "$OUTDIR"
fi
exit $rc
