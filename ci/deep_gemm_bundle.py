"""The DeepGEMM part of the GPU bundle: `python ci/gpu_bundle.py --deep-gemm deep_gemm/54e2261`.

Writes OUT/deep_gemm/ (git-ignored, like all of .gpu-bundle):

  source.tar.xz       deepseek-ai/DeepGEMM at the line's pinned commit with its series applied: the branch
                      `sglpatch apply --line LINE` makes in the line's default base (build/deep_gemm-<commit>,
                      fetched from SGLPATCH_DEEP_GEMM_SOURCE); members DeepGEMM/...
  third-party.tar.xz  what its submodules would hold and the build needs: third-party/cutlass/include/{cute,
                      cutlass} from the pin's stand-in wheel (sgl-deep-gemm, sha256 in pin.json),
                      third-party/fmt/include/fmt from cmeel-fmt (ci/gpu-bundle-requirements-deep_gemm.txt,
                      hashed), and wheel-headers/: that wheel's three SM90 paged-MQA headers, which the box
                      build hashes beside the source's (ci/build_deep_gemm.sh)
  MANIFEST.json       the line, the commit, the patches, what went in, sizes

Nothing of DeepGEMM is committed: it is fetched into the toolkit's cache and packed here. A stand-in base (no
csrc/, no setup.py) cannot be built, so it is refused.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.lines import all_lines, line_named
from sglpatch.series import load_series
from sglpatch.wheels import fetch_wheel
from sglpatch.wheels import file_sha256 as sha256_file

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "ci" / "gpu-bundle-requirements-deep_gemm.txt"
# the SM90 paged-MQA kernel's own headers: the box build records their sha256 in the source and in the wheel
SM90_HEADERS = (
    "deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/mma/sm90.cuh",
)
SOURCE_PREFIX = "DeepGEMM/"


def newest_line() -> str:
    """The newest DeepGEMM line (the last, by its pin's date)."""
    lines = [line for line in all_lines() if line.project.from_git]
    if not lines:
        raise SystemExit("patches/ holds no DeepGEMM line")
    return lines[-1].name


def applied_source(line_name: str) -> tuple[Git, str]:
    """The line's default base with its series applied (by sglpatch's own apply), and the branch holding it."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "sglpatch", "apply", "--line", line_name]
    if subprocess.run(command, cwd=REPO, env=env, check=False).returncode != 0:
        raise SystemExit(f"sglpatch apply --line {line_name} failed (above)")
    line = line_named(line_name)
    git = Git(line.default_base)
    branch = f"sglpatch/{line.pin().tag}"
    if git.try_run("cat-file", "-e", f"{branch}:csrc/python_api.cpp")[0] != 0:
        raise SystemExit(
            f"{line.default_base} is a stand-in (no csrc/): the bundle needs deepseek-ai/DeepGEMM itself; delete "
            "that folder and set SGLPATCH_DEEP_GEMM_SOURCE to a clone or URL of it"
        )
    return git, branch


def series_prefix(git: Git, branch: str, patches: list, first: int | None, base: str) -> tuple[str, list]:
    """The commit holding only the first FIRST patches of the applied BRANCH (one commit per patch on BASE, the
    pin), and those patches; BRANCH and all of them when FIRST is None."""
    past = int(git.run("rev-list", "--count", f"{base}..{branch}")) - len(patches)
    if past > 0:  # apply says "already applied" over them; the bundle is the line's alone
        raise SystemExit(
            f"{git.workdir}: {branch} holds {past} commit{'s' if past > 1 else ''} past the line's {len(patches)} "
            f"patches, and the bundle packs the line alone: keep them on a branch of your own (`git -C "
            f"{git.workdir} branch my-work {branch}`), take them off {branch} (with it checked out: `git -C "
            f"{git.workdir} reset --keep {branch}~{past}`), then run this again; nothing was written"
        )
    if first is None:
        return branch, patches
    if not 0 <= first <= len(patches):
        raise SystemExit(f"--deep-gemm-patches takes 0 to {len(patches)} (the line has {len(patches)} patches)")
    return git.run("rev-parse", f"{branch}~{len(patches) - first}"), patches[:first]


def pack_source(git: Git, branch: str, packer) -> None:
    data = git.run_bytes("archive", "--format=tar", branch)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            if member.isfile():
                packer.add(SOURCE_PREFIX + member.name, archive.extractfile(member).read(), member.mode or 0o644)


def pack_third_party(stand_in: Path, fmt_wheel: Path, packer) -> None:
    with zipfile.ZipFile(stand_in) as wheel:
        for name in wheel.namelist():
            for folder in ("cute", "cutlass"):
                prefix = f"deep_gemm/include/{folder}/"
                if name.startswith(prefix) and not name.endswith("/"):
                    packer.add(f"third-party/cutlass/include/{folder}/{name[len(prefix):]}", wheel.read(name), 0o644)
        for header in SM90_HEADERS:
            packer.add(f"wheel-headers/{header}", wheel.read(header), 0o644)
    with zipfile.ZipFile(fmt_wheel) as wheel:
        for name in wheel.namelist():
            if name.startswith("cmeel.prefix/include/fmt/") and not name.endswith("/"):
                packer.add(
                    "third-party/fmt/include/" + name.removeprefix("cmeel.prefix/include/"), wheel.read(name), 0o644
                )


def build(
    line_name: str, out: Path, cache: Path, update_hashes: bool, packer_class, download, first: int | None = None
) -> dict:
    """OUT/deep_gemm/{source,third-party}.tar.xz and MANIFEST.json; returns the manifest. FIRST: pack the source
    with only the series' first FIRST patches (0: the pin as it is), e.g. the build-only patches without a kernel
    change, so that the box builds the pinned kernel code."""
    line_name = newest_line() if line_name == "newest" else line_name
    try:
        git, branch = applied_source(line_name)
        line = line_named(line_name)
        pin = line.pin()
        series = load_series(line.directory)
        stand_in = fetch_wheel(pin.wheel.filename.split("-")[1], pin.wheel, pin.project)
    except FatalError as exc:
        raise SystemExit(str(exc)) from None
    branch, patches = series_prefix(git, branch, list(series.patches), first, pin.commit)
    cache.mkdir(parents=True, exist_ok=True)
    fmt = [e for e in download(REQUIREMENTS, "3.11", cache, update_hashes) if e["name"] == "cmeel-fmt"][0]
    dest = out / "deep_gemm"
    dest.mkdir(parents=True, exist_ok=True)
    source = packer_class(dest / "source.tar.xz")
    pack_source(git, branch, source)
    third_party = packer_class(dest / "third-party.tar.xz")
    pack_third_party(stand_in, fmt["path"], third_party)
    archives = {"source": source.close(), "third-party": third_party.close()}
    manifest = {
        "made_by": f"ci/gpu_bundle.py --deep-gemm {line_name}"
        + ("" if first is None else f" --deep-gemm-patches {first}"),
        "line": line.name,
        "source": pin.project.upstream,
        "commit": pin.commit,
        "head": git.run("rev-parse", branch),
        "patches": [{"name": p.name, "sha256": sha256_file(p.path)} for p in patches],
        "stand_in_wheel": {"filename": pin.wheel.filename, "sha256": pin.wheel.sha256},
        "fmt_wheel": {k: fmt[k] for k in ("name", "version", "filename", "sha256")},
        "archives": archives,
        "total_bytes": sum(a["bytes"] for a in archives.values()),
        "built_on_the_box_by": "bash ci/build_deep_gemm.sh (ci/gpu_box.sh --deep-gemm source)",
    }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
