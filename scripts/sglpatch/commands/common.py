"""Options and loading shared by the commands."""

from __future__ import annotations

from pathlib import Path

from sglpatch.pin import Pin, load_pin
from sglpatch.project import default_base_dir, default_patch_dir
from sglpatch.series import Series, load_series
from sglpatch.target import Target, open_target


def add_target_option(parser) -> None:
    parser.add_argument(
        "--sglang",
        metavar="PATH",
        help="a git checkout of sglang or an installed sglang package folder (default: build/sglang, the pinned base)",
    )


def add_series_options(parser) -> None:
    parser.add_argument("--patches", type=Path, default=None, metavar="DIR", help="series folder (default: patches/)")


def load_inputs(args) -> tuple[Series, Pin]:
    patch_dir = args.patches or default_patch_dir()
    return load_series(patch_dir), load_pin(patch_dir)


def resolve_target(args) -> Target:
    return open_target(args.sglang or default_base_dir())
