"""`sglpatch drift`: does each patch of each line still apply to each sglang release from the line's base on?"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from packaging.version import Version

from sglpatch.commands.common import EVERY_LINE, add_series_options, load_line
from sglpatch.errors import FatalError
from sglpatch.lines import UPSTREAM_FILE, Line, all_lines, line_named
from sglpatch.output import plural, progress, say
from sglpatch.pin import Pin
from sglpatch.project import PROJECT_ROOT
from sglpatch.rebase.drift import render_json, render_markdown, render_png, upstream_prs, upstream_records
from sglpatch.rebase.git_releases import source_of, source_refs
from sglpatch.rebase.releases import published_releases, release_commit, releases_repo
from sglpatch.rebase.replay import carry_series, history_between, series_commits
from sglpatch.series import Series
from sglpatch.wheels import downloaded_wheels, fetch_wheel


def add_arguments(parser) -> None:
    add_series_options(parser, line_default=EVERY_LINE)
    parser.add_argument(
        "--releases",
        help="comma-separated sglang releases (default: every release from the pin on); for a DeepGEMM line, "
        "refs of its source (default: every branch)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "build" / "drift",
        help="report folder, one subfolder per line (default build/drift; `make drift DOCS=1` writes docs/drift)",
    )
    parser.add_argument(
        "--upstream-json",
        action="store_true",
        help="also write each later line's upstream.json: the patches of this line its release already has",
    )


def run(args) -> int:
    """Each line (--line: one; --patches: that folder) against the releases from its base on."""
    if args.patches:
        series, pin = load_line(args, None)
        return (_drift_commits if pin.project.from_git else _drift)(series, pin, args, args.out)
    lines = [line_named(args.line)] if args.line else all_lines()
    for line in lines:
        say(f"== line {line.name}")
        series, pin = load_line(args, line)
        if not line.project.from_git:
            _drift(series, pin, args, args.out / line.name)
            if args.upstream_json:
                _write_upstream_json(line, series, args.out / line.name / "drift.json")
            continue
        try:
            _drift_commits(series, pin, args, args.out / line.name)
        except FatalError as exc:
            if args.line:
                raise
            say(f"line {line.name} skipped: {exc}")  # every line was asked for: the others' reports stand
    return 0


def _drift_commits(series: Series, pin: Pin, args, out: Path) -> int:
    """A DeepGEMM line against commits of its source: --releases names refs there (default: every branch)."""
    started = time.monotonic()
    clone, branches = source_refs(pin)
    refs = args.releases.split(",") if args.releases else branches
    tips = {ref: clone.rev_parse(f"{ref}^{{commit}}") for ref in refs}
    if missing := [ref for ref, tip in tips.items() if tip is None]:
        raise FatalError(f"{source_of(pin.project)} has no {', '.join(missing)} (its branches: {', '.join(branches)})")
    commits = series_commits(clone, pin.commit, series.patches)
    try:
        matrix = {
            f"{ref} ({tips[ref][:7]})": carry_series(
                commits, series, tips[ref], history_between(clone, pin.commit, tips[ref])
            )[0]
            for ref in refs
        }
    finally:
        commits.workspace.close()
    _write_report(matrix, time.monotonic() - started, pin, args, out, f"commits fetched from {source_of(pin.project)}")
    return 0


def _write_upstream_json(line: Line, series: Series, report: Path) -> None:
    """Each later line whose release the drift checked: its upstream.json, derived from the drift."""
    if not report.is_file():
        return
    releases = json.loads(report.read_text())["releases"]
    for later in all_lines():
        if later.release in releases and later.release != line.release:
            records = upstream_records(releases, later.release, upstream_prs(series.patches))
            path = later.directory / UPSTREAM_FILE
            path.write_text(json.dumps(records, indent=2) + "\n")
            say(f"wrote {path}: {plural(len(records), 'patch')} of {line.name} upstream at sglang {later.release}")


def _drift(series: Series, pin: Pin, args, out: Path) -> int:
    started = time.monotonic()
    downloads_before = len(downloaded_wheels())
    floor = Version(pin.release)
    if args.releases:
        releases = [r for r in args.releases.split(",") if Version(r) >= floor]
        if not releases:
            say(f"none of {args.releases} is sglang {pin.release} or later: no report for this line")
            return 0
    else:
        releases = published_releases(pin.release)
    repo = releases_repo()
    release_commit(pin.release, repo, fetch_wheel(pin.release, pin.wheel))
    tips = {}
    for number, release in enumerate(releases, 1):
        progress(f"[{number}/{len(releases)}] sglang {release}")
        tips[release] = release_commit(release, repo)
    commits = series_commits(repo, f"v{pin.release}", series.patches)
    matrix = {}
    try:
        for number, release in enumerate(releases, 1):
            progress(f"[{number}/{len(releases)}] carrying the series onto {release}")
            history = history_between(repo, commits.base, tips[release])
            matrix[release] = carry_series(commits, series, tips[release], history)[0]
    finally:
        commits.workspace.close()
    downloaded = len(downloaded_wheels()) - downloads_before
    wheels = f"{plural(downloaded, 'wheel')} downloaded from PyPI" if downloaded else "no wheel downloaded"
    return _write_report(matrix, time.monotonic() - started, pin, args, out, wheels)


def _write_report(matrix: dict, seconds: float, pin: Pin, args, out: Path, source: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    command = "sglpatch drift" + (f" --releases {shlex.quote(args.releases)}" if args.releases else "")
    markdown = render_markdown(matrix, seconds, pin.describe(), source)
    (out / "drift.md").write_text(markdown)
    (out / "drift.json").write_text(render_json(matrix, seconds, command))
    render_png(matrix, out / "drift.png", f"series pinned at {pin.describe()}: drift across releases")
    for line in markdown.rstrip("\n").split("\n"):
        say(line)
    say(f"wrote {out / 'drift.md'}, drift.json and drift.png")
    return 0
