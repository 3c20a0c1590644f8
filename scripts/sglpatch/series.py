"""A series line on disk (`patches/<tag>/`): `series`, one `git format-patch` file per patch,
`SHA256SUMS` and `pin.json`.

`series` is quilt's format (one patch name per line, `#` comments, blank lines),
so quilt and `git am` users can apply the series without this tool. Parsing is
strict: anything unexpected is a FatalError naming the file and line, never a
traceback.
"""

from __future__ import annotations

import email.errors
import email.header
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import FatalError
from sglpatch.pin import pinned_kind
from sglpatch.project_kind import DEFAULT_KIND, KINDS, ProjectKind

SERIES_FILE = "series"
SUMS_FILE = "SHA256SUMS"
# Present while a rebase rewrites the folder; holds the path of the checkout whose `recover` finishes it.
REWRITE_MARKER = ".sglpatch-rewriting"
# A series patches one kind of project (sglang): its package in a checkout, python/sglang/ ...
PACKAGE_PREFIX = DEFAULT_KIND.package_prefix
# ... and its own test tree (test/registered/...): a patch may add its tests there. A checkout holds
# them; a package folder has no test tree, so it gets each patch's package part only.
TEST_TREE_PREFIX = DEFAULT_KIND.test_prefix
_DIFF_START = re.compile(r"^diff --git ", re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.patch$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.+)$")
# A series holds regular files only: no symbolic links (120000), submodules (160000) or other modes.
FILE_MODES = ("100644", "100755")
_MODE_LINE = re.compile(r"^(new file mode|deleted file mode|old mode|new mode) (\S+)$")
_INDEX_MODE = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+ (\S+)$")


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based within its file
    old_start: int
    header: str


class UnsupportedMode(ValueError):
    """A diff section that makes or changes something other than a regular file."""


@dataclass
class FileDiff:
    old_path: str | None  # None when the patch creates the file
    new_path: str | None  # None when the patch deletes the file
    hunks: list[Hunk] = field(default_factory=list)
    new_mode: str | None = None  # the mode the patch gives the file ("new mode" / "new file mode"), if it says

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


@dataclass
class Patch:
    name: str
    path: Path
    data: bytes
    author: str
    date: str
    subject: str
    body: str
    trailers: dict[str, str]
    files: list[FileDiff]
    project: ProjectKind = DEFAULT_KIND  # whose paths it names

    @property
    def touched_paths(self) -> list[str]:
        seen: dict[str, None] = {}
        for diff in self.files:
            for p in (diff.old_path, diff.new_path):
                if p:
                    seen[p] = None
        return list(seen)

    @property
    def created_paths(self) -> list[str]:
        """Files the patch creates (absent before it)."""
        return [diff.new_path for diff in self.files if diff.old_path is None and diff.new_path]

    @property
    def modes(self) -> dict[str, str]:
        """The mode each file has after the patch, for the files whose mode it sets."""
        return {diff.new_path: diff.new_mode for diff in self.files if diff.new_mode and diff.new_path}

    def trailer(self, key: str) -> str | None:
        return self.trailers.get(key.lower())

    @property
    def touches_test_tree(self) -> bool:
        """Whether it touches anything outside the package: sglang's test tree, DeepGEMM's tests/ or csrc/."""
        return any(not path.startswith(self.project.package_prefix) for path in self.touched_paths)

    def package_part(self) -> Patch | None:
        """This patch without its files outside the package (what a package folder gets); None when
        it touches nothing inside it."""
        if not self.touches_test_tree:
            return self
        text = self.data.decode("utf-8")
        starts = [m.start() for m in _DIFF_START.finditer(text)]
        sections = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)], strict=True)]
        kept = [
            section
            for section, diff in zip(sections, self.files, strict=True)
            if diff.path.startswith(self.project.package_prefix)
        ]
        if not kept:
            return None
        return parse_patch(self.name, (text[: starts[0]] + "".join(kept)).encode("utf-8"), self.path, self.project)

    @property
    def related_prs(self) -> list[str]:
        """The sglang PRs it cites: the one it carries (`Upstream-PR`, which rebase and drift look for
        upstream) and the one it only extends (`Extends-PR`, informational), in that order."""
        return [n for n in (self.trailer("upstream-pr"), self.trailer("extends-pr")) if n]

    @property
    def tests(self) -> list[str]:
        """The test files its `Tests:` trailer names, in order."""
        return [t.strip() for t in (self.trailer("tests") or "").split(",") if t.strip()]

    def hunk_at(self, path: str, old_line: int) -> Hunk | None:
        for diff in self.files:
            if path in (diff.old_path, diff.new_path):
                for hunk in diff.hunks:
                    if hunk.old_start == old_line:
                        return hunk
        return None


@dataclass
class Series:
    directory: Path
    patches: list[Patch]

    @property
    def touched_paths(self) -> list[str]:
        seen: dict[str, None] = {}
        for patch in self.patches:
            for p in patch.touched_paths:
                seen[p] = None
        return list(seen)

    def package_part(self) -> Series:
        """The series as a package folder takes it: each patch's package files only."""
        parts = [patch.package_part() for patch in self.patches]
        return Series(self.directory, [patch for patch in parts if patch is not None])

    def digest(self) -> str:
        h = hashlib.sha256()
        for patch in self.patches:
            h.update(patch.name.encode() + b"\0" + patch.data + b"\0")
        return h.hexdigest()


# -- series file -----------------------------------------------------------------


def parse_series_text(text: str, origin: str = SERIES_FILE) -> list[str]:
    names: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *options = line.split()
        if options and options != ["-p1"]:
            raise FatalError(f"{origin}:{lineno}: only the -p1 option is supported, got {' '.join(options)!r}")
        if not _NAME.match(name):
            raise FatalError(f"{origin}:{lineno}: {name!r} is not a patch file name (NNNN-name.patch, no paths)")
        if name in names:
            raise FatalError(f"{origin}:{lineno}: {name} is listed twice")
        names.append(name)
    if not names:
        raise FatalError(f"{origin}: lists no patches")
    return names


def parse_sums_text(text: str, origin: str = SUMS_FILE) -> dict[str, str]:
    sums: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        match = re.fullmatch(r"([0-9a-f]{64}) [ *]([^/\s]+)", raw.strip())
        if not match:
            raise FatalError(f"{origin}:{lineno}: not a 'sha256  name' line")
        sums[match.group(2)] = match.group(1)
    return sums


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def render_sums(patches: list[Patch]) -> str:
    return "".join(f"{sha256_hex(p.data)}  {p.name}\n" for p in patches)


# -- one patch file --------------------------------------------------------------


def _decode_header(value: str) -> str:
    """A mail header as text (RFC 2047 words decoded); ValueError for one that cannot be read."""
    parts = []
    try:
        for chunk, charset in email.header.decode_header(value):
            parts.append(chunk.decode(charset or "utf-8", "replace") if isinstance(chunk, bytes) else chunk)
    except LookupError:
        raise ValueError(f"header {value[:60]!r} is in an unknown charset") from None
    except email.errors.HeaderParseError as exc:
        raise ValueError(f"header {value[:60]!r} cannot be decoded ({exc})") from None
    return " ".join("".join(parts).split())


def _strip_patch_prefix(subject: str) -> str:
    # `[PATCH 1/4]` is format-patch's; the `[DSA]`-style tags after it are ours.
    return re.sub(r"^\[[^\]]*PATCH[^\]]*\]\s*", "", subject)


def _unquote_path(raw: str) -> str:
    if not (raw.startswith('"') and raw.endswith('"') and len(raw) >= 2):
        return raw
    try:  # git C-quotes unusual names: "\303\251" is UTF-8 written as octal bytes
        return raw[1:-1].encode("latin-1").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeError, ValueError):
        raise ValueError(f"cannot read quoted path {raw!r}") from None


def _side_path(raw: str, side: str) -> str | None:
    raw = _unquote_path(raw.split("\t")[0].strip())
    if raw == "/dev/null":
        return None
    if not raw.startswith(side + "/"):
        raise ValueError(f"path {raw!r} lacks the {side}/ prefix")
    return raw[len(side) + 1 :]


def parse_trailers(body: str) -> dict[str, str]:
    paragraphs = [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    if not paragraphs:
        return {}
    trailers: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        match = _TRAILER.match(line.strip())
        if not match:
            return {}
        trailers[match.group(1).lower()] = match.group(2).strip()
    return trailers


def _split_message(text: str) -> tuple[dict[str, str], str, str]:
    header_text, sep, rest = text.partition("\n\n")
    if not sep:
        raise ValueError("no blank line after the mail header")
    headers: dict[str, str] = {}
    last = None
    for line in header_text.splitlines()[1:]:  # first line is the mbox "From <sha> <date>"
        if line[:1] in (" ", "\t") and last:
            headers[last] += " " + line.strip()
            continue
        key, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"bad header line {line!r}")
        last = key.strip().lower()
        headers[last] = value.strip()
    message, sep, diff = ("\n" + rest).partition("\n---\n")
    if not sep:
        raise ValueError("no '---' line between the message and the diff")
    return headers, message, diff


def _parse_diff(diff: str) -> list[FileDiff]:
    files: list[FileDiff] = []
    current: FileDiff | None = None
    headers: dict[int, tuple[str, str]] = {}  # per section: its `diff --git` names, and how the file changes
    lines = diff.splitlines()
    position = 0
    while position < len(lines):
        line = lines[position]
        position += 1
        if line.startswith("diff --git "):
            current = FileDiff(old_path=None, new_path=None)
            files.append(current)
            headers[id(current)] = (line, "")
        elif current is None:
            continue
        elif line.startswith(("new file mode ", "deleted file mode ")) and line.split()[-1] in FILE_MODES:
            headers[id(current)] = (headers[id(current)][0], line.split()[0])
            current.new_mode = line.split()[-1] if line.startswith("new ") else None
        elif line.startswith("new mode ") and line.split()[-1] in FILE_MODES:
            current.new_mode = line.split()[-1]
            continue
        elif line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
            raise ValueError(f"binary hunk for {current.path or 'a file'}: binary patches are not supported")
        elif line.startswith("--- "):
            current.old_path = _side_path(line[4:], "a")
        elif line.startswith("+++ "):
            current.new_path = _side_path(line[4:], "b")
        elif line.startswith(("rename from ", "copy from ")):
            current.old_path = _unquote_path(line.split(" from ", 1)[1])
            check_path_is_safe(current.old_path)  # git applies to these names even if ---/+++ say otherwise
        elif line.startswith(("rename to ", "copy to ")):
            current.new_path = _unquote_path(line.split(" to ", 1)[1])
            check_path_is_safe(current.new_path)
        elif (mode := _MODE_LINE.match(line) or _INDEX_MODE.match(line)) and mode.groups()[-1] not in FILE_MODES:
            _refuse_mode(mode.groups()[-1], line, lines, position)
        elif line.startswith("@@"):
            match = _HUNK.match(line)
            if not match:
                raise ValueError(f"bad hunk header {line!r}")
            current.hunks.append(Hunk(len(current.hunks) + 1, int(match.group(1)), line))
            position = _skip_hunk_body(lines, position, match, current.path)
    if not files:
        raise ValueError("holds no 'diff --git' section")
    for f in files:
        if f.old_path is None and f.new_path is None:
            _paths_from_header(f, *headers[id(f)])
    return files


def _paths_from_header(diff: FileDiff, header: str, change: str) -> None:
    """A section without ---/+++ lines (a mode change, an empty file created or deleted) names its file only in
    `diff --git a/P b/P`; `change` is "new", "deleted" or "" (the file stays)."""
    names = header[len("diff --git ") :]
    quoted = re.fullmatch(r'("(?:[^"\\]|\\.)*") ("(?:[^"\\]|\\.)*")', names)
    if quoted:
        old, new = (_unquote_path(q) for q in quoted.groups())
    else:
        half = (len(names) - 1) // 2
        old, new = names[:half], names[half + 1 :]
    if not (old.startswith("a/") and new.startswith("b/") and old[2:] == new[2:] and old[2:]):
        raise ValueError(f"a 'diff --git' section names no file it changes ({header[:80]!r})")
    path = old[2:]
    diff.old_path = None if change == "new" else path
    diff.new_path = None if change == "deleted" else path


def _refuse_mode(mode: str, line: str, lines: list[str], position: int) -> None:
    section = next((lines[i] for i in range(position - 1, -1, -1) if lines[i].startswith("diff --git ")), "")
    path = section.rsplit(" b/", 1)[-1] if " b/" in section else "a file"
    what = {"120000": "a symbolic link", "160000": "a submodule (gitlink)", "040000": "a folder"}.get(mode, "a file")
    raise UnsupportedMode(
        f"{path} would become {what} (mode {mode}, '{line}'): a series may only hold regular files "
        f"(modes {' or '.join(FILE_MODES)})"
    )


def _skip_hunk_body(lines: list[str], position: int, header: re.Match, path: str) -> int:
    """Consume exactly the lines the hunk header announces; a short hunk means a truncated file."""
    old_left = int(header.group(2) if header.group(2) is not None else 1)
    new_left = int(header.group(4) if header.group(4) is not None else 1)
    while old_left > 0 or new_left > 0:
        if position >= len(lines):
            raise ValueError(f"truncated: a hunk of {path} ends early")
        kind = lines[position][:1]
        if kind in (" ", ""):
            old_left, new_left = old_left - 1, new_left - 1
        elif kind == "-":
            old_left -= 1
        elif kind == "+":
            new_left -= 1
        elif kind != "\\":
            raise ValueError(f"truncated or damaged hunk in {path}: unexpected line {lines[position][:40]!r}")
        position += 1
    if old_left < 0 or new_left < 0:
        raise ValueError(f"hunk of {path} is longer than its header says")
    return position


def check_path_is_safe(path: str, project: ProjectKind | None = None) -> None:
    """A plain relative path outside .git/, where a patch of `project` may write (any kind's place when None:
    a checkout record's paths, whose kind the record does not name)."""
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"path {path!r} is not a plain relative path")
    if any(p.lower() == ".git" for p in parts):
        raise ValueError(f"path {path!r} reaches inside .git/")
    allowed = project.patch_prefixes if project else tuple(p for kind in KINDS for p in kind.patch_prefixes)
    if not path.startswith(allowed):
        project = project or DEFAULT_KIND
        first, *others = project.patch_prefixes
        raise ValueError(f"path {path!r} is outside {first} (and {project.name}'s {', '.join(others)})")


def parse_patch(name: str, data: bytes, path: Path | None = None, project: ProjectKind = DEFAULT_KIND) -> Patch:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FatalError(f"{name}: malformed patch: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\r\n" in text:
        raise FatalError(f"{name}: malformed patch: CRLF line endings (git format-patch writes LF)")
    if not text.startswith("From "):
        raise FatalError(f"{name}: malformed patch: not a git format-patch file (no 'From ' line)")
    try:
        headers, message, diff = _split_message(text)
        files = _parse_diff(diff)
        for f in files:
            for p in (f.old_path, f.new_path):
                if p is not None:
                    check_path_is_safe(p, project)
        for key in ("from", "date", "subject"):
            if not headers.get(key):
                raise ValueError(f"no {key.capitalize()}: header")
        author, subject = _decode_header(headers["from"]), _decode_header(headers["subject"])
    except UnsupportedMode as exc:
        raise FatalError(f"{name}: refused: {exc}") from None
    except ValueError as exc:
        raise FatalError(f"{name}: malformed patch: {exc}") from None
    body = message.strip("\n")
    return Patch(
        name=name,
        path=path or Path(name),
        data=data,
        author=author,
        date=headers["date"],
        subject=_strip_patch_prefix(subject),
        body=body,
        trailers=parse_trailers(body),
        files=files,
        project=project,
    )


# -- the whole series ------------------------------------------------------------


def load_series(directory: Path, verify_sums: bool = True, project: ProjectKind | None = None) -> Series:
    """The series in `directory`, its paths those of `project` (default: the kind its pin.json names)."""
    directory = Path(directory).resolve()
    project = project or pinned_kind(directory)
    refuse_half_rewritten(directory)
    series_path = directory / SERIES_FILE
    if not series_path.is_file():
        raise FatalError(f"{series_path}: no series file")
    names = parse_series_text(_read_text(series_path), str(series_path))
    sums = parse_sums_text(_read_text(directory / SUMS_FILE), SUMS_FILE) if verify_sums else {}
    patches = []
    for name in names:
        patch_path = directory / name
        if not patch_path.is_file() or patch_path.is_symlink():
            raise FatalError(f"series names {name}, but {patch_path} is not a regular file")
        data = patch_path.read_bytes()
        if verify_sums:
            expected = sums.get(name)
            if expected is None:
                raise FatalError(f"{SUMS_FILE} has no checksum for {name}")
            if sha256_hex(data) != expected:
                raise FatalError(
                    f"checksum mismatch for {name}: {SUMS_FILE} says {expected[:12]}…, file is {sha256_hex(data)[:12]}…"
                )
        patches.append(parse_patch(name, data, patch_path, project))
    return Series(directory, patches)


def refuse_half_rewritten(directory: Path) -> None:
    """A series folder a killed rebase was rewriting may mix old and new files: not to be used until finished."""
    marker = Path(directory) / REWRITE_MARKER
    if marker.exists():
        target = marker.read_text(encoding="utf-8", errors="replace").strip() or "its checkout"
        raise FatalError(
            f"{directory}: a rebase of {target} was interrupted while rewriting this series; "
            f"run {hints.recover(target)} to finish it"
        )


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise FatalError(f"{path}: missing")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FatalError(f"{path}: not UTF-8 text") from None
