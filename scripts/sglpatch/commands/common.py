"""Options and loading shared by the commands: the target, and which series line goes with it."""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.lines import Line, all_lines, default_line, line_for_blobs, line_for_target, line_named
from sglpatch.pin import Pin, load_pin
from sglpatch.project import default_base_dir
from sglpatch.project_kind import DEFAULT_KIND, KINDS, ProjectKind
from sglpatch.rebase.default_base import ensure_default_base
from sglpatch.series import Series, load_series
from sglpatch.targets import RebaseInProgress, Target, open_target, read_state

# What --sglang and --line mean when left out, for the commands' help (each says its own)
OWN_BASE = "the line's own base, build/sglang for the default line"
BY_TARGET = "the one matching the target's sglang version; without --sglang, the default line"
EVERY_LINE = "every line"
NEWEST_LINE = "the newest line"
ANY_TARGET = (
    "a git checkout of sglang or an installed sglang package folder (or a DeepGEMM checkout, for a deep_gemm line)"
)
CHECKOUT = "a git checkout of sglang"


def add_target_option(parser, what: str = ANY_TARGET) -> None:
    parser.add_argument("--sglang", metavar="PATH", help=f"{what} (default: {OWN_BASE})")


def add_line_option(parser, default: str = BY_TARGET) -> None:
    parser.add_argument("--line", metavar="TAG", help=f"the series line, e.g. v0.5.23 (default: {default})")


def add_series_options(parser, line_default: str = BY_TARGET) -> None:
    parser.add_argument(
        "--patches", type=Path, default=None, metavar="DIR", help="a series folder to use instead of a line"
    )
    add_line_option(parser, line_default)


def chosen_line(args, target: Target | None = None) -> Line | None:
    """--line; else the line matching the target's version; else the default line. None with --patches."""
    if getattr(args, "patches", None):
        return None
    if args.line:
        return line_named(args.line)
    if target is None:
        return default_line()
    if target.project is not DEFAULT_KIND:  # DeepGEMM: by the pinned files it holds, not its version
        return line_for_blobs(target.project, target.current_blobs)
    try:
        return line_for_target(target.root, target.version(), target.nearest_release_tag)
    except FatalError as no_line:
        return _line_of_a_rebase(target, no_line)


def _line_of_a_rebase(target: Target, no_line: FatalError) -> Line:
    """A checkout mid-rebase holds ONTO's release, which may have no line: the line the rebase carries, or the
    refusal that names the rebase (or whatever else is in the way); else the refusal of the release."""
    state = read_state(target) if target.is_git else None
    if isinstance(state, RebaseInProgress) and state.rebase.patch_dir:
        carried = Path(state.rebase.patch_dir).resolve()
        for line in all_lines():
            if line.directory.resolve() == carried:
                return line
    if state is not None and (why := state.refusal()):
        raise FatalError(why) from None
    raise no_line


def load_line(args, line: Line | None) -> tuple[Series, Pin]:
    if line is None:
        return load_series(args.patches), load_pin(args.patches)
    pin = line.pin()
    return load_series(line.directory, project=line.project), pin


def load_inputs(args, target: Target | None = None) -> tuple[Series, Pin]:
    return load_line(args, chosen_line(args, target))


def base_dir(args) -> Path:
    """The default base of --line (or of the default line) when no --sglang is given."""
    if getattr(args, "patches", None) and not args.line:
        return default_base_dir()
    return (line_named(args.line) if args.line else default_line()).default_base


def resolve_target(args) -> Target:
    if args.sglang:
        return open_any_target(args.sglang, line_named(args.line) if getattr(args, "line", None) else None)
    return open_any_target(base_dir(args), line_named(args.line) if getattr(args, "line", None) else None)


def open_any_target(path, line: Line | None = None) -> Target:
    """The target at `path`, of the kind of `line` when given, else of the kind the tree shows."""
    return open_target(path, line.project if line else kind_of(Path(path).expanduser()))


def kind_of(root: Path) -> ProjectKind:
    """The kind of project at `root` (sglang's unless the tree is only another kind's)."""
    for kind in KINDS:
        if (root / kind.package_prefix / "__init__.py").is_file():
            return kind
        if kind.is_package(root / kind.package) or kind.is_package(root):
            return kind
    return DEFAULT_KIND


def open_with_line(args, build_base: bool = False) -> tuple[Target, Line | None, Series, Pin]:
    """The target and its line's series. Without --sglang: the line's default base, built from its pin
    when `build_base` and missing. With --sglang: the line matching the target (or --line)."""
    if args.sglang:
        target = open_any_target(args.sglang, line_named(args.line) if args.line else None)
        line = chosen_line(args, target)
        return (target, line, *load_line(args, line))
    line = chosen_line(args)
    where = line.default_base if line else default_base_dir()
    if line is not None and line.is_default and not args.line:
        line = _line_the_base_holds(where) or line
    series, pin = load_line(args, line)
    if build_base:
        ensure_default_base(pin, where)
    return open_target(where, pin.project), line, series, pin


def _line_the_base_holds(where: Path) -> Line | None:
    """After a rebase of the default base (build/sglang) it holds another line's release: that line."""
    if not (where / ".git").is_dir():
        return None
    target = open_target(where)
    try:
        return line_for_target(target.root, target.version(), target.nearest_release_tag)
    except FatalError:
        return None
