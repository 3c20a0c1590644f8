#!/usr/bin/env python3
"""Build the offline bundle that lets sglang's DSA test kit run on an air-gapped GPU box.

The GPU box (see docs/gpu-bundle.md) has python3 3.12 and torch 2.11+cu130 but no package
registry.  This script, run on a machine that reaches PyPI, downloads every wheel the kit needs
and the box lacks, checks each one against the sha256 recorded in ci/gpu-bundle.lock, and packs
three xz-compressed tar files into the output folder:

  deps.tar.xz        pinned third-party wheels, unpacked into one site folder (site/...)
  sgl-kernel.tar.xz  sgl_kernel + triton_kernels from sglang-kernel, without FA3 and sm100/
  sglang.tar.xz      the pristine sglang package from its PyPI wheel (multimodal_gen/ and the
                     cp311-only srt/grpc/_core*.so dropped); patches are applied on the box

plus MANIFEST.json (what went in, sizes, hashes).  Wheels are cached in .cache/gpu-bundle/ so the
615 MB sglang-kernel wheel is fetched once.

Usage:
  python ci/gpu_bundle.py --out .gpu-bundle            # download (cached), verify, pack
  python ci/gpu_bundle.py --out .gpu-bundle --update-lock   # (re)write hashes into the lock
  python ci/gpu_bundle.py --verify-only                # check cached wheels against the lock

Only the standard library and `python -m pip download` are used.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LOCK = REPO / "ci" / "gpu-bundle.lock"
DEFAULT_CACHE = REPO / ".cache" / "gpu-bundle"

# ---------------------------------------------------------------------------
# What goes in.  Versions are exact: sglang 0.5.14's own pins where it has one
# (transformers, openai, flashinfer, ...), the versions measured to work on the
# H200 image for DeepGEMM (sglang itself pins sgl-deep-gemm 0.1.3 / tvm-ffi 0.1.9,
# which do not build against torch 2.11+cu130), and for unpinned names a release
# that imports with the rest (fastapi stops before 0.145, which pulls in
# opentelemetry at import time).
# ---------------------------------------------------------------------------
DEP_PINS: list[tuple[str, str, str]] = [
    # name, version, why
    ("transformers", "5.8.1", "sglang pin; the box has 5.17, which 0.5.14 cannot use"),
    ("tokenizers", "0.22.2", "transformers 5.8.1 needs <=0.23.0; the box has 0.23.2"),
    ("flashinfer-python", "0.6.12", "sglang pin; imported at module level by the sampler"),
    ("openai", "2.6.1", "sglang pin"),
    ("jiter", "0.19.0", "openai"),
    ("distro", "1.9.0", "openai"),
    ("sniffio", "1.3.1", "openai"),
    ("pydantic", "2.14.4", "sglang server args / protocol types"),
    ("pydantic-core", "2.50.5", "pydantic 2.14.4 exact pin"),
    ("annotated-types", "0.8.0", "pydantic"),
    ("typing-inspection", "0.4.5", "pydantic, fastapi"),
    ("typing-extensions", "4.16.0", "pydantic 2.14 needs >=4.16"),
    ("fastapi", "0.140.12", "imported by sglang entrypoints"),
    ("starlette", "1.10.0", "fastapi"),
    ("uvicorn", "0.54.0", "imported by sglang entrypoints"),
    ("orjson", "3.13.0", "sglang"),
    ("pybase64", "1.5.1", "sglang"),
    ("msgspec", "0.23.0", "sglang"),
    ("gguf", "0.19.0", "sglang model loader"),
    ("compressed-tensors", "0.20.1", "sglang quantization imports"),
    ("loguru", "0.7.3", "compressed-tensors"),
    ("partial-json-parser", "0.2.1.1.post7", "sglang"),
    ("dill", "0.4.1", "sglang"),
    ("pyzmq", "27.3.0", "sglang"),
    ("setproctitle", "1.3.8", "sglang"),
    ("ipython", "9.18.1", "sglang imports IPython"),
    ("ipython-pygments-lexers", "1.1.1", "ipython"),
    ("jedi", "0.20.1", "ipython"),
    ("parso", "0.8.7", "jedi"),
    ("matplotlib-inline", "0.2.2", "ipython"),
    ("traitlets", "5.16.1", "ipython"),
    ("pexpect", "4.9.0", "ipython"),
    ("ptyprocess", "0.7.0", "pexpect"),
    ("prompt-toolkit", "3.0.53", "ipython"),
    ("wcwidth", "0.9.4", "prompt-toolkit"),
    ("stack-data", "0.6.3", "ipython"),
    ("executing", "2.3.0", "stack-data"),
    ("asttokens", "3.0.2", "stack-data"),
    ("pure-eval", "0.2.4", "stack-data"),
    ("sgl-deep-gemm", "0.1.5.post1", "import deep_gemm for torch 2.11 / CUDA 13 (JIT at first use)"),
    ("apache-tvm-ffi", "0.1.11", "sgl-deep-gemm and flashinfer runtime"),
]
SGLANG_PIN = ("sglang", "0.5.14")
KERNEL_PIN = ("sglang-kernel", "0.4.4")

# Target interpreter of the GPU box.  pip matches manylinux tags exactly, so list them.
PY_VERSION = "3.12"
PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
]
# The sglang 0.5.14 wheel is published as cp311 only (because of srt/grpc/_core*.so); its
# Python sources are version independent, and the .so is dropped from the bundle.
SGLANG_PY_VERSION = "3.11"

# Pruning rules.
SGLANG_DROP_DIRS = ("sglang/multimodal_gen/",)
SGLANG_DROP_PREFIX = "sglang/srt/grpc/_core"
KERNEL_KEEP_TOP = ("sgl_kernel/", "triton_kernels/")
KERNEL_DROP = ("sgl_kernel/flash_ops", "sgl_kernel/sm100/")

XZ_PRESET = 9


def log(msg: str) -> None:
    print(f"[gpu-bundle] {msg}", flush=True)


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Lock file: one line per wheel, tab separated:  role name version filename sha256 size
# ---------------------------------------------------------------------------
def read_lock(path: Path) -> dict[str, dict]:
    entries: dict[str, dict] = {}
    if not path.exists():
        return entries
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        role, name, version, filename, digest, size = line.split("\t")
        entries[norm(name)] = dict(
            role=role,
            name=name,
            version=version,
            filename=filename,
            sha256=digest,
            size=int(size),
        )
    return entries


def write_lock(path: Path, entries: list[dict]) -> None:
    lines = [
        "# Wheels bundled for the air-gapped GPU run of sglang's DSA kit (ci/gpu_bundle.py).",
        "# Regenerate with: python ci/gpu_bundle.py --update-lock",
        "# role\tname\tversion\tfilename\tsha256\tsize",
    ]
    for e in entries:
        lines.append("\t".join([e["role"], e["name"], e["version"], e["filename"], e["sha256"], str(e["size"])]))
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Download
# ---------------------------------------------------------------------------
def wheel_matches(filename: str, name: str, version: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    return norm(parts[0]) == norm(name) and parts[1] == version


def find_cached(cache: Path, name: str, version: str) -> Path | None:
    hits = sorted(p for p in cache.glob("*.whl") if wheel_matches(p.name, name, version))
    return hits[0] if hits else None


def pip_download(cache: Path, name: str, version: str, py_version: str) -> Path:
    found = find_cached(cache, name, version)
    if found:
        return found
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        py_version,
        "--implementation",
        "cp",
        "--dest",
        str(cache),
        "--quiet",
    ]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    cmd.append(f"{name}=={version}")
    log(f"downloading {name}=={version}")
    subprocess.run(cmd, check=True)
    found = find_cached(cache, name, version)
    if not found:
        raise SystemExit(f"pip reported success but no wheel for {name}=={version} in {cache}")
    return found


def fetch_all(cache: Path, lock: dict[str, dict], update_lock: bool) -> list[dict]:
    cache.mkdir(parents=True, exist_ok=True)
    wanted = [("dep", n, v, PY_VERSION) for n, v, _ in DEP_PINS]
    wanted.append(("sglang", *SGLANG_PIN, SGLANG_PY_VERSION))
    wanted.append(("kernel", *KERNEL_PIN, PY_VERSION))
    entries = []
    problems = []
    for role, name, version, pyv in wanted:
        path = pip_download(cache, name, version, pyv)
        digest = sha256_file(path)
        entry = dict(
            role=role,
            name=name,
            version=version,
            filename=path.name,
            sha256=digest,
            size=path.stat().st_size,
            path=path,
        )
        locked = lock.get(norm(name))
        if not update_lock:
            if locked is None:
                problems.append(f"{name}=={version}: not in the lock (run with --update-lock)")
            elif locked["version"] != version or locked["filename"] != path.name:
                problems.append(f"{name}: lock has {locked['filename']}, got {path.name}")
            elif locked["sha256"] != digest:
                problems.append(f"{name}: sha256 {digest} != locked {locked['sha256']}")
        entries.append(entry)
    if problems:
        for p in problems:
            log("LOCK MISMATCH " + p)
        raise SystemExit("wheels do not match ci/gpu-bundle.lock; refusing to bundle")
    log(f"{len(entries)} wheels present and " + ("hashed for the lock" if update_lock else "verified against the lock"))
    return entries


# ---------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------
def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mode = mode
    ti.mtime = 0  # reproducible archives
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def wheel_members(whl: Path):
    """Yield (path inside site, bytes, mode) for a wheel, the way an installer lays it out:
    <dist>.data/purelib|platlib/* go to the root; scripts/headers/data are left out."""
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename
            top = name.split("/", 1)[0]
            if top.endswith(".data"):
                rest = name.split("/", 2)
                if len(rest) < 3 or rest[1] not in ("purelib", "platlib"):
                    continue
                name = rest[2]
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            if name.endswith(".so"):
                mode |= 0o755
            yield name, zf.read(info), mode


class Packer:
    def __init__(self, path: Path):
        self.path = path
        self.tar = tarfile.open(path, "w:xz", preset=XZ_PRESET)
        self.raw_bytes = 0
        self.files = 0
        self.seen: set[str] = set()

    def add(self, name: str, data: bytes, mode: int) -> None:
        if name in self.seen:
            raise SystemExit(f"{self.path.name}: two wheels provide {name}")
        self.seen.add(name)
        self.tar.addfile(_tarinfo(name, len(data), mode), io.BytesIO(data))
        self.raw_bytes += len(data)
        self.files += 1

    def close(self) -> dict:
        self.tar.close()
        return dict(
            file=self.path.name,
            files=self.files,
            unpacked_bytes=self.raw_bytes,
            bytes=self.path.stat().st_size,
            sha256=sha256_file(self.path),
        )


def pack_deps(entries: list[dict], out: Path) -> dict:
    p = Packer(out / "deps.tar.xz")
    for e in entries:
        if e["role"] != "dep":
            continue
        for name, data, mode in wheel_members(e["path"]):
            if name.endswith(".pyc") or "/__pycache__/" in name:
                continue
            p.add("site/" + name, data, mode)
    return p.close()


def pack_kernel(entry: dict, out: Path) -> dict:
    p = Packer(out / "sgl-kernel.tar.xz")
    dropped = []
    for name, data, mode in wheel_members(entry["path"]):
        keep_dist = name.startswith("sglang_kernel-") and name.endswith(("METADATA", "top_level.txt"))
        if not (name.startswith(KERNEL_KEEP_TOP) or keep_dist):
            continue
        if name.startswith(KERNEL_DROP):
            dropped.append((name, len(data)))
            continue
        p.add("pkgs/" + name, data, mode)
    info = p.close()
    info["dropped"] = {n: s for n, s in dropped}
    return info


def pack_sglang(entry: dict, out: Path) -> dict:
    p = Packer(out / "sglang.tar.xz")
    dropped_bytes = 0
    for name, data, mode in wheel_members(entry["path"]):
        keep_dist = name.startswith("sglang-") and name.endswith(("METADATA", "top_level.txt"))
        if not (name.startswith("sglang/") or keep_dist):
            continue
        if name.startswith(SGLANG_DROP_DIRS) or name.startswith(SGLANG_DROP_PREFIX):
            dropped_bytes += len(data)
            continue
        if name.endswith(".pyc") or "/__pycache__/" in name:
            continue
        p.add("pkgs/" + name, data, mode)
    info = p.close()
    info["dropped_bytes"] = dropped_bytes
    info["dropped"] = list(SGLANG_DROP_DIRS) + [SGLANG_DROP_PREFIX + "*.so"]
    return info


def stage_patches(sources: list[str], out: Path) -> list[str]:
    """Copy patch series into OUT/patches/ (the run script applies OUT/patches/series in order).

    Each source is a folder with a `series` file, a folder of *.patch (name order), or a series
    file.  Several sources are concatenated in the order given, and then names get a running
    NN- prefix so two series that both start at 0001- cannot collide; a single source keeps
    its names."""
    import shutil

    dest = out / "patches"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    names = []
    for src in sources:
        sp = Path(src)
        if sp.is_dir() and (sp / "series").exists():
            sp = sp / "series"
        if sp.is_dir():
            files = sorted(sp.glob("*.patch"))
        else:
            files = []
            for line in sp.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    files.append(sp.parent / line.split()[0])
        if not files:
            raise SystemExit(f"no patches in {src}")
        for f in files:
            name = f"{len(names) + 1:02d}-{f.name}" if len(sources) > 1 else f.name
            shutil.copyfile(f, dest / name)
            names.append(name)
    (dest / "series").write_text("".join(n + "\n" for n in names))
    for n in names:
        log(f"staged patch {n}")
    return names


def build(args) -> int:
    if args.patches_only:
        stage_patches(args.patches, Path(args.out))
        return 0
    lock_path = Path(args.lock)
    lock = read_lock(lock_path)
    entries = fetch_all(Path(args.cache), lock, args.update_lock)
    if args.update_lock:
        write_lock(lock_path, entries)
        log(f"wrote {lock_path}")
    if args.verify_only:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("deps.tar.xz", "sgl-kernel.tar.xz", "sglang.tar.xz", "MANIFEST.json"):
        (out / stale).unlink(missing_ok=True)
    t0 = time.time()
    by_role = {e["role"]: e for e in entries if e["role"] != "dep"}
    archives = {
        "deps": pack_deps(entries, out),
        "sgl-kernel": pack_kernel(by_role["kernel"], out),
        "sglang": pack_sglang(by_role["sglang"], out),
    }
    total = sum(a["bytes"] for a in archives.values())
    manifest = {
        "made_by": "ci/gpu_bundle.py",
        "target": {
            "python": PY_VERSION,
            "platform": "linux x86_64",
            "torch_expected": "2.11.0+cu130 (already on the box)",
        },
        "archives": archives,
        "total_bytes": total,
        "wheels": [{k: e[k] for k in ("role", "name", "version", "filename", "sha256", "size")} for e in entries],
    }
    if args.patches:
        manifest["patches"] = stage_patches(args.patches, out)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for a in archives.values():
        log(
            f"{a['file']:<18} {a['bytes'] / 2**20:6.1f} MiB packed, "
            f"{a['unpacked_bytes'] / 2**20:6.1f} MiB unpacked, {a['files']} files"
        )
    log(f"bundle total {total / 2**20:.1f} MiB in {out} ({time.time() - t0:.0f} s)")
    if total > args.max_mib * 2**20:
        log(f"ERROR: bundle exceeds the {args.max_mib} MiB budget")
        return 1
    return 0


def _default_patches() -> list[str]:
    series = REPO / "patches" / "series"
    return [str(series)] if series.exists() else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".gpu-bundle"), help="bundle folder")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="wheel download cache")
    ap.add_argument("--lock", default=str(DEFAULT_LOCK), help="lock file with sha256 per wheel")
    ap.add_argument(
        "--update-lock", action="store_true", help="record the downloaded wheels' hashes instead of checking them"
    )
    ap.add_argument(
        "--verify-only", action="store_true", help="download if needed and check against the lock; do not pack"
    )
    ap.add_argument(
        "--patches",
        nargs="*",
        default=_default_patches(),
        help="patch series to stage into OUT/patches (folders with a series file, "
        "folders of *.patch, or series files; default: patches/series if present)",
    )
    ap.add_argument(
        "--patches-only",
        action="store_true",
        help="only (re)stage --patches into OUT/patches; leave the archives alone",
    )
    ap.add_argument(
        "--max-mib", type=float, default=45.0, help="fail if the three archives together exceed this (default 45)"
    )
    args = ap.parse_args(argv)
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
