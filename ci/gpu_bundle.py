#!/usr/bin/env python3
"""Build the offline bundle that lets sglang's DSA test kit run on an air-gapped GPU box.

The GPU box (see docs/gpu-bundle.md) has python3 3.12 and torch 2.11+cu130 but no package
registry.  This script, run on a machine that reaches PyPI, downloads every wheel the kit needs
and the box lacks, named with its sha256 in two hashed requirements files (pip itself refuses a
wheel whose hash differs: `--require-hashes`), and packs three xz-compressed tar files into the
output folder:

  deps.tar.xz        pinned third-party wheels, unpacked into one site folder (site/...)
  sgl-kernel.tar.xz  sgl_kernel + triton_kernels from sglang-kernel, without FA3 and sm100/
  sglang.tar.xz      the pristine sglang package from its PyPI wheel (multimodal_gen/ and the
                     cp311-only srt/grpc/_core*.so dropped); patches are applied on the box

plus MANIFEST.json (what went in, sizes, hashes).  Wheels are cached in .cache/gpu-bundle/ so the
615 MB sglang-kernel wheel is fetched once.

plus, with ``--deep-gemm deep_gemm/54e2261``, OUT/deep_gemm/: DeepGEMM's source at that line's pin with its
series applied and the headers its build needs (ci/deep_gemm_bundle.py; built on the box by
ci/build_deep_gemm.sh).

plus, per further series line (``--line v0.5.23``), OUT/<line>/sglang.tar.xz: that line's pristine
sglang package from the wheel its patches/<line>/pin.json names (checked against the pin's
sha256; every *.so dropped, they are cp311 builds the box's Python 3.12 cannot load), with its
own MANIFEST.json, and OUT/<line>/deps.tar.xz when ci/gpu-bundle-requirements-<line>.txt names
wheels that line needs beyond the shared ones (unpacked for that line's trees only).  The line's
patches are applied on the box from patches/<line>/series.

Usage:
  python ci/gpu_bundle.py --out .gpu-bundle            # download (cached), verify, pack
  python ci/gpu_bundle.py --out .gpu-bundle --line v0.5.23   # only the per-line part of that line
  python ci/gpu_bundle.py --update-hashes              # after changing a pin: record the new hashes
  python ci/gpu_bundle.py --verify-only                # check cached wheels against the hashes

Downloads go through the toolkit's one `pip download` (scripts/sglpatch/wheels.py) and the
series through its parser (scripts/sglpatch/series.py); nothing else beyond the standard library.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sys
import tarfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from sglpatch.errors import FatalError  # noqa: E402
from sglpatch.pin import load_pin  # noqa: E402
from sglpatch.series import SERIES_FILE, parse_series_text  # noqa: E402
from sglpatch.wheels import (
    fetch_wheel,  # noqa: E402
    pip_download,  # noqa: E402
)
from sglpatch.wheels import file_sha256 as sha256_file  # noqa: E402

DEFAULT_CACHE = REPO / ".cache" / "gpu-bundle"
# What goes in, with why each version: pinned and hashed in these files (one per target Python).
DEPS_REQUIREMENTS = REPO / "ci" / "gpu-bundle-requirements.txt"
SGLANG_REQUIREMENTS = REPO / "ci" / "gpu-bundle-sglang-requirements.txt"
KERNEL_NAME = "sglang-kernel"
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:(?P<sha256>[0-9a-f]{64})\b")

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


# ---------------------------------------------------------------------------
# Hashed requirements: `name==version --hash=sha256:HEX  # why`, one wheel a line
# ---------------------------------------------------------------------------
def read_requirements(path: Path) -> list[dict]:
    pins = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _REQUIREMENT.match(line)
        if not match:
            raise SystemExit(f"{path}:{number}: not a `name==version --hash=sha256:HEX` line")
        pins.append(match.groupdict())
    return pins


def _role(path: Path, name: str) -> str:
    if path == SGLANG_REQUIREMENTS:
        return "sglang"
    return "kernel" if norm(name) == KERNEL_NAME else "dep"


def wheel_matches(filename: str, name: str, version: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    return norm(parts[0]) == norm(name) and parts[1] == version


def find_cached(cache: Path, name: str, version: str) -> Path | None:
    hits = sorted(p for p in cache.glob("*.whl") if wheel_matches(p.name, name, version))
    return hits[0] if hits else None


def download(path: Path, py_version: str, cache: Path, update_hashes: bool) -> list[dict]:
    """The wheels `path` names, in `cache`: checked by pip against their hashes, or (update_hashes)
    fetched by version and their hashes written back into `path`."""
    pins = read_requirements(path)
    if update_hashes:
        wanted = [f"{p['name']}=={p['version']}" for p in pins]
    else:
        wanted = ["--require-hashes", "-r", str(path)]
    log(f"pip download {len(pins)} wheels of {path.name} (Python {py_version})")
    try:
        pip_download(wanted, cache, py_version, PLATFORMS, what=f"the wheels of {path.name}")
    except FatalError as exc:
        raise SystemExit(str(exc)) from None
    entries = []
    for pin in pins:
        found = find_cached(cache, pin["name"], pin["version"])
        if found is None:
            raise SystemExit(f"pip reported success but no wheel for {pin['name']}=={pin['version']} in {cache}")
        digest = sha256_file(found) if update_hashes else pin["sha256"]
        entries.append(
            dict(
                role=_role(path, pin["name"]),
                name=pin["name"],
                version=pin["version"],
                filename=found.name,
                sha256=digest,
                size=found.stat().st_size,
                path=found,
            )
        )
    if update_hashes:
        _write_hashes(path, {e["name"]: e["sha256"] for e in entries})
    return entries


def _write_hashes(path: Path, hashes: dict[str, str]) -> None:
    def rehash(match: re.Match) -> str:
        return f"{match['name']}=={match['version']} --hash=sha256:{hashes[match['name']]}"

    lines = [_REQUIREMENT.sub(rehash, line) for line in path.read_text().splitlines()]
    path.write_text("\n".join(lines) + "\n")
    log(f"wrote the hashes of {len(hashes)} wheels into {path}")


def fetch_all(cache: Path, update_hashes: bool) -> list[dict]:
    cache.mkdir(parents=True, exist_ok=True)
    entries = download(DEPS_REQUIREMENTS, PY_VERSION, cache, update_hashes)
    entries += download(SGLANG_REQUIREMENTS, SGLANG_PY_VERSION, cache, update_hashes)
    log(f"{len(entries)} wheels present and " + ("hashed" if update_hashes else "checked by pip against their hashes"))
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


def pack_sglang(entry: dict, out: Path, drop_all_so: bool = False) -> dict:
    p = Packer(out / "sglang.tar.xz")
    dropped_bytes = 0
    for name, data, mode in wheel_members(entry["path"]):
        keep_dist = name.startswith("sglang-") and name.endswith(("METADATA", "top_level.txt"))
        if not (name.startswith("sglang/") or keep_dist):
            continue
        cp311_so = drop_all_so and name.endswith(".so")
        if name.startswith(SGLANG_DROP_DIRS) or name.startswith(SGLANG_DROP_PREFIX) or cp311_so:
            dropped_bytes += len(data)
            continue
        if name.endswith(".pyc") or "/__pycache__/" in name:
            continue
        p.add("pkgs/" + name, data, mode)
    info = p.close()
    info["dropped_bytes"] = dropped_bytes
    info["dropped"] = list(SGLANG_DROP_DIRS) + (["sglang/**/*.so"] if drop_all_so else [SGLANG_DROP_PREFIX + "*.so"])
    return info


def line_requirements(line: str) -> Path:
    return REPO / "ci" / f"gpu-bundle-requirements-{line}.txt"


def build_line(line: str, out: Path, cache: Path, update_hashes: bool = False) -> int:
    """OUT/<line>/sglang.tar.xz from the wheel patches/<line>/pin.json pins (sha256-checked), and
    OUT/<line>/deps.tar.xz from the line's own hashed requirements, if it has any."""
    line_dir = REPO / "patches" / line
    try:
        pin = load_pin(line_dir)
        wheel = fetch_wheel(pin.release, pin.wheel)  # the toolkit's cache; checked against the pin
    except FatalError as exc:
        raise SystemExit(str(exc)) from None
    if sha256_file(wheel) != pin.wheel.sha256:
        raise SystemExit(f"{wheel} does not match the sha256 in {line_dir / 'pin.json'}")
    dest = out / line
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    entry = dict(name="sglang", version=pin.release, filename=wheel.name, sha256=pin.wheel.sha256, path=wheel)
    archives = {"sglang": pack_sglang(entry, dest, drop_all_so=True)}
    extra = line_requirements(line)
    (dest / "deps.tar.xz").unlink(missing_ok=True)
    wheels = []
    if extra.exists():
        cache.mkdir(parents=True, exist_ok=True)
        entries = download(extra, PY_VERSION, cache, update_hashes)
        archives["deps"] = pack_deps(entries, dest)
        wheels = [{k: e[k] for k in ("name", "version", "filename", "sha256", "size")} for e in entries]
    manifest = {
        "made_by": "ci/gpu_bundle.py --line " + line,
        "line": line,
        "pin": str((line_dir / "pin.json").relative_to(REPO)),
        "wheel": {k: entry[k] for k in ("name", "version", "filename", "sha256")},
        "archives": archives,
        "wheels": wheels,
        "patches": f"patches/{line}/series (applied on the box, not staged)",
    }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, info in archives.items():
        log(
            f"{line}/{name}.tar.xz {info['bytes'] / 2**20:.1f} MiB packed, {info['unpacked_bytes'] / 2**20:.1f} MiB "
            f"unpacked, {info['files']} files ({time.time() - t0:.0f} s)"
        )
    return 0


def stage_patches(sources: list[str], out: Path) -> list[str]:
    """Copy patch series into OUT/patches/ (the run script applies OUT/patches/series in order).

    Each source is a folder with a `series` file, a folder of *.patch (name order), or a series
    file.  Several sources are concatenated in the order given, and then names get a running
    NN- prefix so two series that both start at 0001- cannot collide; a single source keeps
    its names."""
    dest = out / "patches"
    refuse_foreign_patches(out)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    names = []
    for src in sources:
        sp = Path(src)
        if sp.is_dir() and (sp / SERIES_FILE).exists():
            sp = sp / SERIES_FILE
        if sp.is_dir():
            files = sorted(sp.glob("*.patch"))
        else:
            try:
                files = [sp.parent / name for name in parse_series_text(sp.read_text(), str(sp))]
            except FatalError as exc:
                raise SystemExit(str(exc)) from None
        if not files:
            raise SystemExit(f"no patches in {src}")
        for f in files:
            name = f"{len(names) + 1:02d}-{f.name}" if len(sources) > 1 else f.name
            shutil.copyfile(f, dest / name)
            names.append(name)
    (dest / SERIES_FILE).write_text("".join(n + "\n" for n in names))
    for n in names:
        log(f"staged patch {n}")
    return names


def refuse_foreign_patches(out: Path) -> None:
    """OUT/patches is replaced only as stage_patches left it: `series` and the files it lists, nothing else (an
    --out naming a project of the user's must not lose its own patches/ folder)."""
    dest = out / "patches"
    if not (dest.exists() or dest.is_symlink()) or _staged_here(dest):
        return
    raise SystemExit(
        f"{dest} is not a patches folder this script staged (it holds more than a series and the files it lists); "
        "move it away or choose another --out, then run this again; nothing was changed"
    )


def _staged_here(dest: Path) -> bool:
    if dest.is_symlink() or not dest.is_dir():
        return False
    entries = list(dest.iterdir())
    if not entries:
        return True
    if any(e.is_symlink() or not e.is_file() for e in entries):
        return False
    try:
        listed = parse_series_text((dest / SERIES_FILE).read_text(), str(dest / SERIES_FILE))
    except (OSError, UnicodeDecodeError, FatalError):
        return False
    return {e.name for e in entries} == {SERIES_FILE, *listed}


def build_deep_gemm(line: str, out: Path, cache: Path, update_hashes: bool = False, first: int | None = None) -> int:
    """OUT/deep_gemm/: the DeepGEMM source with the line applied, its third-party headers (ci/deep_gemm_bundle.py)."""
    import deep_gemm_bundle  # noqa: PLC0415 - beside this script; only this part needs it

    t0 = time.time()
    manifest = deep_gemm_bundle.build(line, out, cache, update_hashes, Packer, download, first)
    for name, info in manifest["archives"].items():
        log(
            f"deep_gemm/{name}.tar.xz {info['bytes'] / 2**20:.1f} MiB packed, {info['unpacked_bytes'] / 2**20:.1f} "
            f"MiB unpacked, {info['files']} files"
        )
    log(f"deep_gemm part {manifest['total_bytes'] / 2**20:.1f} MiB ({manifest['line']}, {time.time() - t0:.0f} s)")
    return 0


def refuse_foreign_manifest(folder: Path) -> None:
    """FOLDER/MANIFEST.json is replaced only where a run of this script wrote it (a file of that name in a folder
    of the user's, which --out may name, is theirs)."""
    manifest = folder / "MANIFEST.json"
    if not (manifest.exists() or manifest.is_symlink()):
        return
    try:
        made_by = json.loads(manifest.read_text()).get("made_by", "")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        made_by = ""
    if not str(made_by).startswith("ci/gpu_bundle.py"):
        raise SystemExit(
            f"{manifest} is not a manifest this script wrote; move it away or choose another --out, then run this "
            "again; nothing was changed"
        )


def _manifest_folders(args) -> list[Path]:
    """The folders whose MANIFEST.json this run writes."""
    out = Path(args.out)
    if args.deep_gemm:
        return [out / "deep_gemm"]
    if args.line:
        return [out / line for line in args.line]
    return [] if args.patches_only or args.verify_only else [out]


def build(args) -> int:
    for folder in _manifest_folders(args):  # before any download or write: a refusal changes nothing
        refuse_foreign_manifest(folder)
    if args.deep_gemm:
        return build_deep_gemm(
            args.deep_gemm, Path(args.out), Path(args.cache), args.update_hashes, args.deep_gemm_patches
        )
    if args.line:
        return max(build_line(line, Path(args.out), Path(args.cache), args.update_hashes) for line in args.line)
    if args.patches_only:
        stage_patches(args.patches, Path(args.out))
        return 0
    if args.patches and not args.verify_only:
        refuse_foreign_patches(Path(args.out))  # before the archives: a refusal changes nothing
    entries = fetch_all(Path(args.cache), args.update_hashes)
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
    series = REPO / "patches" / "v0.5.14" / "series"
    return [str(series)] if series.exists() else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".gpu-bundle"), help="bundle folder")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="wheel download cache")
    ap.add_argument(
        "--update-hashes",
        action="store_true",
        help="record the downloaded wheels' hashes in the requirements files instead of checking them",
    )
    ap.add_argument(
        "--verify-only", action="store_true", help="download if needed and let pip check the hashes; do not pack"
    )
    ap.add_argument(
        "--patches",
        nargs="*",
        default=_default_patches(),
        help="patch series to stage into OUT/patches (folders with a series file, "
        "folders of *.patch, or series files; default: patches/v0.5.14/series if present)",
    )
    ap.add_argument(
        "--patches-only",
        action="store_true",
        help="only (re)stage --patches into OUT/patches; leave the archives alone",
    )
    ap.add_argument(
        "--line",
        action="append",
        metavar="LINE",
        help="build only the per-line part OUT/LINE/ of a further series line (e.g. v0.5.23: the "
        "pristine sglang of patches/LINE/pin.json, and the wheels of ci/gpu-bundle-requirements-LINE.txt); "
        "repeatable",
    )
    ap.add_argument(
        "--deep-gemm",
        nargs="?",
        const="newest",
        metavar="LINE",
        help="build only OUT/deep_gemm/ (LINE left out: the newest DeepGEMM line): deepseek-ai/DeepGEMM at the DeepGEMM line LINE's pin with its series "
        "applied (e.g. deep_gemm/54e2261; the source from SGLPATCH_DEEP_GEMM_SOURCE), cute/cutlass and fmt headers",
    )
    ap.add_argument(
        "--deep-gemm-patches",
        type=int,
        metavar="N",
        help="with --deep-gemm: the source with only the line's first N patches applied (0: the pin itself); "
        "default all. N=1 on deep_gemm/54e2261 is the build patch alone: the pinned SM90 kernel code",
    )
    ap.add_argument(
        "--max-mib", type=float, default=45.0, help="fail if the three archives together exceed this (default 45)"
    )
    args = ap.parse_args(argv)
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
