"""`sglpatch export`: write the series folder from commits in a git repo.

The commits BASE..HEAD become `NNNN-subject.patch` files (git format-patch,
full blob ids so 3-way apply can find the preimages), `series`,
`SHA256SUMS`, and `pin.json`'s blobs for every touched file at BASE. Everything
is produced and checked before the first file is replaced, so an error changes
nothing; each file is then replaced atomically (a kill between two renames can
leave old and new files side by side: `sha256sum -c SHA256SUMS` shows it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.output import say
from sglpatch.pin import PIN_FILE, Pin, load_pin
from sglpatch.project import default_patch_dir
from sglpatch.series import SERIES_FILE, SUMS_FILE, parse_patch, render_sums

SERIES_HEADER = """\
# The patch series, in order, against the sglang release named in pin.json.
# quilt format: one file name per line. Apply with `make apply`, or without
# this tool: `git am --keep-non-patch $(grep -v '^#' series)` in a checkout,
# or `quilt push -a` with QUILT_PATCHES pointing here.
"""


def add_arguments(parser) -> None:
    parser.add_argument("--from", dest="repo", required=True, type=Path, help="git repo holding the series as commits")
    parser.add_argument("--base", required=True, help="the commit the series sits on (the pinned release)")
    parser.add_argument("--head", default="HEAD", help="last commit of the series (default HEAD)")
    parser.add_argument(
        "--patches", type=Path, default=None, metavar="DIR", help="series folder to write (default: patches/)"
    )


def run(args) -> int:
    out_dir = args.patches or default_patch_dir()
    repo = Git(args.repo)
    for rev in (args.base, args.head):
        if repo.rev_parse(rev) is None:
            raise FatalError(f"{args.repo}: no commit {rev}")
    pin = load_pin(out_dir)
    names = export_series(repo, args.base, args.head, out_dir, pin)
    say(f"wrote {len(names)} patches, series, {SUMS_FILE} and {PIN_FILE} to {out_dir}")
    return 0


def export_series(repo: Git, base: str, head: str, out_dir: Path, pin: Pin) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="sglpatch-export-") as tmp:
        repo.run(
            "format-patch",
            "-q",
            "--zero-commit",
            "--full-index",
            "--no-signature",
            "--no-renames",
            "--subject-prefix=PATCH",
            "-o",
            tmp,
            f"{base}..{head}",
        )
        produced = sorted(Path(tmp).glob("*.patch"))
        if not produced:
            raise FatalError(f"no commits between {base} and {head}")
        patches = [parse_patch(p.name, p.read_bytes(), p) for p in produced]
        touched = sorted({path for patch in patches for path in patch.touched_paths})
        blobs = _blobs_at(repo, base, touched)
        new_pin = Pin(pin.release, pin.tag, pin.date, pin.wheel, blobs)
        staged = {p.name: p.data for p in patches}
        staged[SERIES_FILE] = (SERIES_HEADER + "".join(f"{p.name}\n" for p in patches)).encode()
        staged[SUMS_FILE] = render_sums(patches).encode()
        staged[PIN_FILE] = new_pin.to_json().encode()
    _replace_folder_contents(out_dir, staged)
    return [p.name for p in patches]


def _blobs_at(repo: Git, rev: str, paths: list[str]) -> dict[str, str]:
    listed = repo.run("ls-tree", "-r", rev, "--", *paths)
    found = {line.split("\t", 1)[1]: line.split()[2] for line in listed.splitlines()}
    return {p: found.get(p, "") for p in paths}


def _replace_folder_contents(out_dir: Path, files: dict[str, bytes]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        tmp = out_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, out_dir / name)
    for old in out_dir.glob("*.patch"):
        if old.name not in files:
            old.unlink()
