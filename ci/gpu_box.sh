# Sourced by ci/run_dsa_kit.sh and ci/run_indexer_gpu.sh on the GPU box: the bundle's
# unpacking and the environment (import path, JIT caches) both runners need.
# Expects PY (a python) and a `say` function to be defined by the caller.

# unpack_bundle BUNDLE WORK: deps -> WORK/site, sgl-kernel and sglang -> WORK/pkgs (exit 3 if missing)
unpack_bundle() {
  local bundle="$1" work="$2" a
  for a in deps sgl-kernel sglang; do
    [ -f "$bundle/$a.tar.xz" ] || { echo "missing $bundle/$a.tar.xz (run ci/gpu_bundle.py)" >&2; exit 3; }
  done
  "$PY" - "$bundle" "$work" <<'PYEOF' || exit 3
import sys, tarfile
bundle, work = sys.argv[1], sys.argv[2]
for name in ("deps", "sgl-kernel", "sglang"):
    with tarfile.open(f"{bundle}/{name}.tar.xz") as t:
        t.extractall(work, filter="data")
PYEOF
}

# use_bundle_env BUNDLE WORK: the unpacked packages first on the path; JIT caches under WORK/jit,
# restored from BUNDLE/jit-cache.tar.gz when an earlier run saved one. Sets JIT.
use_bundle_env() {
  local bundle="$1" work="$2"
  export PYTHONPATH="$work/pkgs:$work/site${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  JIT="$work/jit"
  export DG_JIT_CACHE_DIR="$JIT/deep_gemm" TRITON_CACHE_DIR="$JIT/triton"
  export TORCHINDUCTOR_CACHE_DIR="$JIT/inductor" XDG_CACHE_HOME="$JIT/xdg"
  mkdir -p "$JIT"
  if [ -f "$bundle/jit-cache.tar.gz" ]; then
    tar -xzf "$bundle/jit-cache.tar.gz" -C "$work" && say "restored JIT caches ($(du -sh "$JIT" | cut -f1))"
  elif ls "$bundle"/jit-cache.tar.gz.part-* >/dev/null 2>&1; then
    cat "$bundle"/jit-cache.tar.gz.part-* | tar -xz -C "$work" && say "restored JIT caches ($(du -sh "$JIT" | cut -f1))"
  fi
}

# save_jit_cache WORK OUTDIR: WORK/jit as OUTDIR/jit-cache.tar.gz, in 15 MiB parts (.part-aa, ...) when
# larger (the run tool brings back files of at most 16 MiB); use_bundle_env restores either form.
save_jit_cache() {
  local work="$1" outdir="$2"
  tar -czf "$outdir/jit-cache.tar.gz" -C "$work" jit 2>/dev/null || return 0
  if [ "$(stat -c %s "$outdir/jit-cache.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15m "$outdir/jit-cache.tar.gz" "$outdir/jit-cache.tar.gz.part-" && rm "$outdir/jit-cache.tar.gz"
  fi
  say "saved JIT caches: $(du -ch "$outdir"/jit-cache.tar.gz* | tail -1 | cut -f1)"
}

# make_line_trees BUNDLE WORK LINE SERIES RECORD: unpack the shared deps and sgl-kernel, then the line's
# pristine sglang into WORK/trees/pristine/sglang and a copy with SERIES applied (ci/apply_series.py,
# RECORD: what it applied) into WORK/trees/patched/sglang. v0.5.14's sglang is the bundle's own part,
# a newer line's sits in BUNDLE/LINE/ (ci/gpu_bundle.py --line LINE). Exit 3: bundle part missing;
# exit 4: the series did not apply.
make_line_trees() {
  local bundle="$1" work="$2" line="$3" series="$4" record="$5" part
  rm -rf "$work" && mkdir -p "$work/trees/pristine" "$work/trees/patched"
  unpack_bundle "$bundle" "$work"
  if [ "$line" != v0.5.14 ]; then
    part="$bundle/$line/sglang.tar.xz"
    [ -f "$part" ] || { echo "missing $part (ci/gpu_bundle.py --line $line)" >&2; exit 3; }
    rm -rf "$work/pkgs/sglang"
    "$PY" - "$part" "$work/line" <<'PYEOF' || exit 3
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:  # members are pkgs/sglang/...
    t.extractall(sys.argv[2], filter="data")
PYEOF
    mv "$work/line/pkgs/sglang" "$work/trees/pristine/sglang"
  else
    mv "$work/pkgs/sglang" "$work/trees/pristine/sglang"
  fi
  cp -a "$work/trees/pristine/sglang" "$work/trees/patched/sglang"
  "$PY" "$REPO/ci/apply_series.py" "$series" --root "$work/trees/patched" --record "$record" \
    || { echo "patch series did not apply" >&2; exit 4; }
}
