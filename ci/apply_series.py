#!/usr/bin/env python3
"""Apply a patch series to an unpacked sglang package folder (the GPU-box side of ci/run_dsa_kit.sh).

  python ci/apply_series.py SOURCE --root DIR [--record FILE]

SOURCE is one of
  - a folder holding a `series` file (patch names in order, `#` comments allowed),
  - a folder without one: every *.patch in it, in name order,
  - a series file itself (names relative to its folder),
  - `none`: apply nothing (pristine run).
DIR is the folder that contains `sglang/` (the package, not a git checkout).

Patches may name files as a/python/sglang/... (a git checkout of sglang) or a/sglang/...
(a package folder); the strip level is worked out per patch from where `sglang/` starts.
Each patch is applied with `git apply` (outside any repository), else `patch`, else a small
exact-context applier in this file.  Any failure stops the series with a non-zero exit.
--record writes JSON: the patches applied, their sha256, and the tool used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HEADER = re.compile(r"^(?:diff --git a/(\S+) b/\S+|--- (?:a/)?(\S+))")


def list_series(source: str) -> list[Path]:
    if source in ("none", "", "-"):
        return []
    src = Path(source).resolve()  # patches are applied from inside the package folder
    if src.is_dir():
        series = src / "series"
        if series.exists():
            return _read_series(series)
        return sorted(src.glob("*.patch"))
    if src.is_file() and src.suffix != ".patch":
        return _read_series(src)
    if src.is_file():
        return [src]
    raise SystemExit(f"patch source {source} does not exist")


def _read_series(series: Path) -> list[Path]:
    out = []
    for line in series.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name = line.split()[0]  # quilt allows options after the name; we take none
        p = series.parent / name
        if not p.exists():
            raise SystemExit(f"{series}: {name} not found")
        out.append(p)
    return out


def strip_level(patch: Path) -> int:
    for line in patch.read_text(errors="replace").splitlines():
        m = HEADER.match(line)
        if not m:
            continue
        path = m.group(1) or m.group(2)
        if path == "/dev/null":
            continue
        parts = ("a/" + path if m.group(1) else line[4:].split()[0]).split("/")
        if "sglang" in parts[:-1]:
            return parts.index("sglang")
    raise SystemExit(f"{patch.name}: no file under sglang/ found in its headers")


def _env() -> dict:
    env = dict(os.environ)
    # never let git discover a repository above the package folder
    env["GIT_CEILING_DIRECTORIES"] = "/"
    return env


def apply_one(patch: Path, root: Path, level: int) -> str:
    if shutil.which("git"):
        base = ["git", "apply", f"-p{level}", "--whitespace=nowarn"]
        chk = subprocess.run(base + ["--check", str(patch)], cwd=root, env=_env(), capture_output=True, text=True)
        if chk.returncode != 0:
            raise SystemExit(f"git apply --check {patch.name} failed:\n{chk.stderr}")
        subprocess.run(base + [str(patch)], cwd=root, env=_env(), check=True)
        return "git apply"
    if shutil.which("patch"):
        base = ["patch", f"-p{level}", "--forward", "--batch", "--fuzz=0", "-i", str(patch)]
        chk = subprocess.run(base + ["--dry-run"], cwd=root, capture_output=True, text=True)
        if chk.returncode != 0:
            raise SystemExit(f"patch --dry-run {patch.name} failed:\n{chk.stdout}{chk.stderr}")
        subprocess.run(base, cwd=root, check=True, stdout=subprocess.DEVNULL)
        return "patch"
    _apply_python(patch, root, level)
    return "python"


# ---------------------------------------------------------------------------
# Last resort: unified diffs with exact context (no fuzz, no renames/binaries).
# ---------------------------------------------------------------------------
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _apply_python(patch: Path, root: Path, level: int) -> None:
    lines = patch.read_text().splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        old = lines[i][4:].split("\t")[0].strip()
        new = lines[i + 1][4:].split("\t")[0].strip()
        i += 2
        target = new if new != "/dev/null" else old
        rel = Path(*target.split("/")[level:])
        path = root / rel
        src = path.read_text().splitlines(keepends=True) if old != "/dev/null" else []
        out, pos = [], 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = HUNK.match(lines[i])
            start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            i += 1
            before, after = [], []
            while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\"):
                tag, body = lines[i][:1], lines[i][1:]
                if tag == "\\":
                    prev = after if after else before
                    if prev:
                        prev[-1] = prev[-1].rstrip("\n")
                elif tag == " ":
                    before.append(body)
                    after.append(body)
                elif tag == "-":
                    before.append(body)
                else:
                    after.append(body)
                i += 1
            if src[start : start + len(before)] != before:
                raise SystemExit(f"{patch.name}: hunk at {rel}:{start + 1} does not match")
            out.extend(src[pos:start])
            out.extend(after)
            pos = start + len(before)
        out.extend(src[pos:])
        if new == "/dev/null":
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="apply a patch series to an sglang package folder")
    ap.add_argument("source")
    ap.add_argument("--root", required=True, help="folder that contains sglang/")
    ap.add_argument("--record", help="write what was applied as JSON here")
    args = ap.parse_args(argv)
    root = Path(args.root)
    if not (root / "sglang").is_dir():
        raise SystemExit(f"{root} has no sglang/ folder")
    applied = []
    for patch in list_series(args.source):
        level = strip_level(patch)
        tool = apply_one(patch, root, level)
        digest = hashlib.sha256(patch.read_bytes()).hexdigest()
        print(f"[apply-series] {patch.name}: applied with {tool} -p{level} (sha256 {digest[:12]})", flush=True)
        applied.append(dict(name=patch.name, sha256=digest, strip=level, tool=tool))
    if not applied:
        print("[apply-series] no patches: pristine tree", flush=True)
    if args.record:
        Path(args.record).write_text(json.dumps(applied, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
