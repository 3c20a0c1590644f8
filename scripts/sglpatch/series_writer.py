"""Writing a series folder from commits: what `export` and a finished `rebase` put in patches/.

The commits BASE..HEAD become `NNNN-subject.patch` files (git format-patch,
full blob ids so 3-way apply can find the preimages), `series`,
`SHA256SUMS`, and `pin.json`'s blobs for every touched file at BASE. Everything
is produced and checked in memory first, so an error changes nothing; each file
is then replaced atomically. A kill between two renames can leave old and new
files side by side (`sha256sum -c SHA256SUMS` shows it); a rebase marks the
folder first (series.REWRITE_MARKER) so that such a kill is detected and
finished by `recover`. Only the patches the folder's `series` listed before are
replaced or removed: any other `*.patch` there is the user's, and stays; `export` replaces or removes a listed
one only while it holds what SHA256SUMS records (else it is the user's edit).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.pin import PIN_FILE, Pin
from sglpatch.safety.durable import write_durably
from sglpatch.safety.interrupts import fault_point
from sglpatch.series import (
    SERIES_FILE,
    SUMS_FILE,
    parse_patch,
    parse_series_text,
    parse_sums_text,
    render_sums,
    sha256_hex,
)

SERIES_HEADER = """\
# The patch series, in order, against the sglang release named in pin.json.
# quilt format: one file name per line. Apply with `make apply`, or without
# this tool from the root of a checkout at that release, P this folder's path:
# `git am --keep-non-patch $(grep -v '^#' "$P/series" | sed "s|^|$P/|")`,
# or `QUILT_PATCHES="$P" quilt push -a`.
"""


# format-patch as the series format has it, whatever the repository's config says (export reads the user's repo,
# a rebase the user's checkout): `diff.noprefix` wrote `--- python/...` (malformed: the rebase stopped at its end
# for ever), `format.signOff` added the user's Signed-off-by to every patch of another author, `format.from` put
# the user in `From:`, `format.coverLetter` wrote a 0000 patch with no diff, `diff.context`, `format.headers`,
# `format.notes`, `format.suffix`, `i18n.logOutputEncoding`, `diff.suppressBlankEmpty` (a blank context line
# written empty), ... changed the bytes or the names of the patches.
_SERIES_FORMAT = tuple(
    "-c format.numbered=auto -c format.useAutoBase=false -c core.quotePath=true -c diff.suppressBlankEmpty=false"
    " format-patch"
    " --src-prefix=a/ --dst-prefix=b/ --unified=3 --inter-hunk-context=0 --diff-algorithm=myers --indent-heuristic"
    " --no-relative -O/dev/null --encoding=UTF-8 --filename-max-length=64 --suffix=.patch --no-signoff"
    " --no-cover-letter --no-attach --no-thread --no-notes --no-add-header --no-to --no-cc --no-from --no-base".split()
)


def render_series(repo: Git, base: str, head: str, pin: Pin) -> dict[str, bytes]:
    """The series folder's files (patches in order, then series, SHA256SUMS, pin.json) for BASE..HEAD."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-export-") as tmp:
        repo.run(
            *_SERIES_FORMAT,
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
        patches = [parse_patch(p.name, p.read_bytes(), p, pin.project) for p in produced]
        touched = {path for patch in patches for path in patch.touched_paths}
        if pin.project.from_git:  # a git kind's pin also names the files its check builds (the kernel's)
            touched |= set(pin.blobs)
        touched = sorted(touched)
        blobs = _blobs_at(repo, base, touched)
        new_pin = pin.with_blobs(blobs)
        staged = {p.name: p.data for p in patches}
        header = SERIES_HEADER.replace(
            "the sglang release", f"the {pin.project.name} commit" if pin.commit else "the sglang release"
        )
        staged[SERIES_FILE] = (header + "".join(f"{p.name}\n" for p in patches)).encode()
        staged[SUMS_FILE] = render_sums(patches).encode()
        staged[PIN_FILE] = new_pin.to_json().encode()
    return staged


def _blobs_at(repo: Git, rev: str, paths: list[str]) -> dict[str, str]:
    listed = repo.run("ls-tree", "-r", rev, "--", *paths)
    found = {line.split("\t", 1)[1]: line.split()[2] for line in listed.splitlines()}
    return {p: found.get(p, "") for p in paths}


def listed_patches(out_dir: Path) -> list[str]:
    """The patches the folder's `series` lists now: the ones a rewrite of the folder replaces (none without a
    readable series: then every patch file there is someone else's)."""
    try:
        return parse_series_text((out_dir / SERIES_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, FatalError):
        return []


def refuse_unlisted_in_the_way(
    out_dir: Path, files: dict[str, bytes], listed: list[str], then: str = "run this again"
) -> None:
    """A patch file of the new series whose name a file the old series did not list already has (with other
    bytes): the user's, which writing the series would overwrite."""
    for name, data in files.items():
        path = out_dir / name
        if name.endswith(".patch") and name not in listed and path.exists() and path.read_bytes() != data:
            raise FatalError(
                f"{path} is not in the series {out_dir / SERIES_FILE} lists, and the new series writes a patch of "
                f"that name; move that file away (or list it in the series), then {then}"
            )


def refuse_changed_listed(out_dir: Path, files: dict[str, bytes], listed: list[str]) -> None:
    """A listed patch the write would replace with other bytes, or remove, whose bytes are not what the folder's
    SHA256SUMS records: an edit made in the file, or a patch listed by hand, which the commits do not hold."""
    sums = _recorded_sums(out_dir)
    for name in listed:
        path = out_dir / name
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if data != files.get(name) and sha256_hex(data) != sums.get(name):
            raise FatalError(
                f"{path} is not what {SUMS_FILE} records (an edit of yours, or a patch you listed by hand), and "
                f"the commits would {'replace' if name in files else 'remove'} it; carry it into the commits or "
                "move it away, then export again; nothing was written"
            )


def _recorded_sums(out_dir: Path) -> dict[str, str]:
    try:
        return parse_sums_text((out_dir / SUMS_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, FatalError):
        return {}


def write_series_files(out_dir: Path, files: dict[str, bytes], replacing: list[str]) -> None:
    """Replace each file atomically and durably, then drop the patches of `replacing` (what the old series
    listed) that the new one does not hold; any other `*.patch` in the folder stays. Safe to run again."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        write_durably(out_dir / name, data, fault_points=False)
        fault_point(f"series folder: {name} written")
    for name in sorted(set(replacing) - set(files)):
        old = out_dir / name
        if old.is_file() and not old.is_symlink():
            old.unlink()
            fault_point(f"series folder: {name} removed")
