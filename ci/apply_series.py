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
Files a patch adds to sglang's own test tree (a/test/registered/...) go under DIR/test/, so
`python -m pytest DIR/test/...` runs them against DIR/sglang (with DIR on PYTHONPATH).
The series file is read by the toolkit's own parser (scripts/sglpatch/series.py) and each
patch is applied with `git apply` through the toolkit's git runner (scripts/sglpatch/git.py),
or with `patch` on a box without git. Any failure stops the series with a non-zero exit.
--record writes JSON: the patches applied, their sha256, and the tool used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from sglpatch.errors import FatalError  # noqa: E402
from sglpatch.git import APPLY, Git  # noqa: E402
from sglpatch.series import SERIES_FILE, parse_series_text  # noqa: E402

HEADER = re.compile(r"^(?:diff --git a/(\S+) b/\S+|--- (?:a/)?(\S+))")


def list_series(source: str) -> list[Path]:
    if source in ("none", "", "-"):
        return []
    src = Path(source).resolve()  # patches are applied from inside the package folder
    if src.is_dir():
        series = src / SERIES_FILE
        if series.exists():
            return _read_series(series)
        return sorted(src.glob("*.patch"))
    if src.is_file() and src.suffix != ".patch":
        return _read_series(src)
    if src.is_file():
        return [src]
    raise SystemExit(f"patch source {source} does not exist")


def _read_series(series: Path) -> list[Path]:
    try:
        names = parse_series_text(series.read_text(encoding="utf-8"), str(series))
    except FatalError as exc:
        raise SystemExit(str(exc)) from None
    out = []
    for name in names:
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


def split_test_tree(patch: Path, workdir: Path) -> tuple[Path, Path | None]:
    """(the patch without its test-tree files, a patch of those files or None), as files in workdir."""
    text = patch.read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"^diff --git ", text, re.MULTILINE)]
    sections = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)], strict=True)]
    tests = [sec for sec in sections if sec.startswith("diff --git a/test/")]
    if not tests:
        return patch, None
    package = [sec for sec in sections if sec not in tests]
    head = text[: starts[0]] if starts else text
    package_file = workdir / patch.name
    test_file = workdir / f"test-tree-{patch.name}"
    package_file.write_text(head + "".join(package), encoding="utf-8")
    test_file.write_text(head + "".join(tests), encoding="utf-8")
    return package_file, test_file


def apply_one(patch: Path, root: Path, level: int) -> str:
    if shutil.which("git"):
        # GIT_CEILING_DIRECTORIES: never let git take a repository above the package folder for its own
        git = Git(root, {"GIT_CEILING_DIRECTORIES": "/"})
        options = (f"-p{level}",)
        status, _, err = git.try_run(*APPLY, *options, "--check", str(patch))
        if status != 0:
            raise SystemExit(f"git apply --check {patch.name} failed:\n{err}")
        git.run(*APPLY, *options, str(patch))
        return "git apply"
    if shutil.which("patch"):
        base = ["patch", f"-p{level}", "--forward", "--batch", "--fuzz=0", "-i", str(patch)]
        chk = subprocess.run(base + ["--dry-run"], cwd=root, capture_output=True, text=True)
        if chk.returncode != 0:
            raise SystemExit(f"patch --dry-run {patch.name} failed:\n{chk.stdout}{chk.stderr}")
        subprocess.run(base, cwd=root, check=True, stdout=subprocess.DEVNULL)
        return "patch"
    raise SystemExit("neither git nor patch is on PATH: cannot apply the series")


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
    with tempfile.TemporaryDirectory() as workdir:
        for patch in list_series(args.source):
            package, tests = split_test_tree(patch, Path(workdir))
            level = strip_level(package)
            tool = apply_one(package, root, level)
            if tests is not None:
                apply_one(tests, root, 1)
            digest = hashlib.sha256(patch.read_bytes()).hexdigest()
            where = " (its sglang test-tree files under test/)" if tests is not None else ""
            print(
                f"[apply-series] {patch.name}: applied with {tool} -p{level}{where} (sha256 {digest[:12]})", flush=True
            )
            applied.append(dict(name=patch.name, sha256=digest, strip=level, tool=tool, test_tree=tests is not None))
    if not applied:
        print("[apply-series] no patches: pristine tree", flush=True)
    if args.record:
        Path(args.record).write_text(json.dumps(applied, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
