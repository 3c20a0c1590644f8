"""`sglpatch pr`: one upstream pull request per PR group of the series.

On the newest series line (--line to pick another), for each group in its
pr-groups.json: a group with a patch upstream already has (the line's
upstream.json records it, or the upstream ref has its change or marker) is left
out, saying why. Build each other group's branch on the upstream ref
(one commit per patch, authorship kept; a stacked group on top of the group it
depends on), check the touched files with sglang's formatters and linters, write
the PR body, and print the exact `gh` command. Dry run by default: nothing
leaves the machine. `--submit` pushes the branches to the fork and runs `gh`
when it is installed and logged in.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from sglpatch import hints
from sglpatch.commands.common import NEWEST_LINE, add_series_options, add_target_option, base_dir, load_line
from sglpatch.default_base import ensure_default_base
from sglpatch.errors import FatalError
from sglpatch.git import Git
from sglpatch.hygiene import check_hygiene
from sglpatch.lines import Line, line_named, newest_line
from sglpatch.output import say
from sglpatch.pr_body import Group, render_body
from sglpatch.pr_groups import load_groups
from sglpatch.project import PROJECT_ROOT
from sglpatch.replay import series_commits, upstream_reason
from sglpatch.rerun import rerun_comment_lines
from sglpatch.series import Patch
from sglpatch.target import open_target

RECORD_FILE = "sglpatch-prs.json"
BRANCH_PREFIX = "sglpatch-pr/"


def add_arguments(parser) -> None:
    add_target_option(parser, what="a git checkout of sglang to build the PR branches in")
    add_series_options(parser, line_default=NEWEST_LINE)
    parser.add_argument("--onto", help="upstream ref to build the branches on (default: the pin's tag)")
    parser.add_argument("--fork", help="your fork: a remote name in the checkout or a URL (needed with --submit)")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "build" / "pr", help="where PR bodies go")
    parser.add_argument("--group", action="append", help="only these group ids (default: all)")
    parser.add_argument("--existing", action="append", default=[], metavar="GROUP=NUMBER", help="a PR already open")
    parser.add_argument("--submit", action="store_true", help="push to the fork and run gh (default: dry run)")


def run(args) -> int:
    line = None if args.patches else (line_named(args.line) if args.line else newest_line())
    series, pin = load_line(args, line)
    config = load_groups(series)
    if config["backport"] and line is not None:
        raise FatalError(
            f"line {line.name} is a backport line, so it sends no PR upstream: {config['backport']} "
            f"(make pr prepares the newest line, {newest_line().name})"
        )
    if args.sglang is None:  # the line's own base, built from its pin when missing
        where = line.default_base if line else base_dir(args)
        target = open_target(ensure_default_base(pin, where))
    else:
        target = open_target(args.sglang)
    if not target.is_git:
        raise FatalError("pr needs a git checkout of sglang to build branches in")
    git = target.git
    groups = [g for g in config["groups"] if not args.group or g.id in args.group]
    if args.group and len(groups) != len(args.group):
        raise FatalError(f"unknown group in {args.group}; known: {', '.join(g.id for g in config['groups'])}")
    fork = resolve_fork(git, args.fork) if (args.submit or args.fork) else None
    onto = git.rev_parse(args.onto or pin.tag)
    if onto is None:
        raise FatalError(f"{args.onto or pin.tag} is not a commit in {target.root}")
    if line is not None:
        say(f"line {line.name}: {len(groups)} PR groups, on {args.onto or pin.tag}")
    groups = _not_upstream(groups, config, line, git, onto)
    records = _load_records(git)
    for number in args.existing:
        group_id, _, pr = number.partition("=")
        if not pr.isdigit():
            raise FatalError(f"--existing takes GROUP=NUMBER, got {number!r}")
        records.setdefault(group_id, {})["number"] = int(pr)
    args.out.mkdir(parents=True, exist_ok=True)
    tips: dict[str, str] = {}
    for group in groups:
        base = tips.get(group.depends_on[0]) if group.depends_on else onto
        if group.depends_on and base is None:
            base = git.rev_parse(BRANCH_PREFIX + _group(config, group.depends_on[0]).branch)
        if base is None:
            raise FatalError(f"group {group.id} depends on {group.depends_on[0]}, whose branch is not built")
        tips[group.id] = _prepare(git, group, base, onto, records, config, fork, args)
    _save_records(git, records)
    return 0


def _not_upstream(groups: list[Group], config: dict, line: Line | None, git: Git, onto: str) -> list[Group]:
    """The groups to prepare: a group with a patch upstream already has (or one it stacks on) is left out."""
    recorded = {_title_of(r["patch"]): r for r in (line.upstreamed() if line else [])}
    left_out: set[str] = set()
    kept = []
    for group in groups:
        reasons = [why for patch in group.patches if (why := _upstream_why(patch, recorded, git, onto))]
        blocked = [dep for dep in group.depends_on if dep in left_out]
        if reasons or blocked:
            left_out.add(group.id)
            because = reasons[0] if reasons else f"it stacks on {blocked[0]}, left out"
            say(f"{group.id}: no PR: {because}")
            continue
        kept.append(group)
    return kept


def _upstream_why(patch: Patch, recorded: dict, git: Git, onto: str) -> str | None:
    if record := recorded.get(_title_of(patch.name)):
        pr_number = f" (#{record['upstream_pr']})" if record.get("upstream_pr") else ""
        since = f" since sglang {record['release']}" if record.get("release") else ""
        return f"{patch.name} is upstream{pr_number}{since}, as upstream.json records"
    with tempfile.TemporaryDirectory(prefix="sglpatch-pr-") as scratch:  # never the checkout's own index
        why = upstream_reason(git.with_env(GIT_INDEX_FILE=str(Path(scratch) / "index")), onto, patch)
    if why:
        return f"{patch.name} is already upstream at {git.run('describe', '--tags', '--always', onto)}: {why}"
    return None


def _title_of(patch_name: str) -> str:
    """A patch file name without its number: the same patch keeps it from line to line."""
    return patch_name.split("-", 1)[-1]


def _prepare(git: Git, group: Group, base: str, onto: str, records: dict, config: dict, fork, args) -> str:
    branch = BRANCH_PREFIX + group.branch
    tip = build_branch(git, group, base)
    check_hygiene(git, base, tip, group.id)
    record = records.setdefault(group.id, {})
    previous = record.get("head")
    range_diff = None
    if record.get("number") and previous and previous != tip and git.rev_parse(previous):
        range_diff = git.run(
            "range-diff", "--no-color", f"{_base_of(git, previous, len(group.patches))}..{previous}", f"{base}..{tip}"
        )
    rerun = _rerun_lines(group) if record.get("number") else None
    stack = stack_lines(group, config, records)
    body = render_body(group, PROJECT_ROOT, stack, range_diff, rerun)
    body_path = args.out / f"{group.id}.md"
    body_path.write_text(body)
    git.run("update-ref", f"refs/heads/{branch}", tip)
    command = gh_command(group, config["upstream"], fork, body_path, record.get("number"))
    say(
        f"{group.id}: branch {branch} ({len(group.patches)} commits on {git.run('describe', '--tags', '--always', base)})"
    )
    say(f"  body: {body_path}")
    push = ["push", "--force-with-lease", "-q", fork["push"] if fork else "FORK", f"{branch}:refs/heads/{group.branch}"]
    if not args.submit:
        say(f"  dry run, nothing pushed; it would push: {shlex.join(['git', '-C', str(git.workdir), *push])}")
        if not fork:
            say("  (FORK=<remote or URL> names your fork; gh then gets --head <its owner>:<branch>)")
        say(f"  dry run, nothing pushed; to open it: {shlex.join(command)}")
        return tip
    git.run(*push)
    record.update(head=tip, branch=group.branch, base=onto)
    say(f"  pushed {group.branch} to {fork['label']}")
    _run_gh(command, record)
    return tip


def build_branch(git: Git, group: Group, base: str) -> str:
    """The group's patches as commits on `base`, authorship kept; returns the tip."""
    built = series_commits(git, base, group.patches, f"group {group.id}", three_way=True, committer=git.committer())
    with built.workspace as workspace:
        workspace.copy_commit_to(built.commits[-1], git, "refs/sglpatch/pr-build")
    git.run("update-ref", "-d", "refs/sglpatch/pr-build")
    return built.commits[-1]


def _group(config: dict, group_id: str) -> Group:
    return next(g for g in config["groups"] if g.id == group_id)


def stack_lines(group: Group, config: dict, records: dict) -> list[str]:
    lines = []
    for dep in group.depends_on:
        other = _group(config, dep)
        number = records.get(dep, {}).get("number")
        ref = f"#{number}" if number else f"the `{other.branch}` PR (not opened yet)"
        lines.append(f"**Stacked PR**: depends on {ref} ({other.title}); review and merge that one first.")
    for other in config["groups"]:
        if group.id in other.depends_on:
            number = records.get(other.id, {}).get("number")
            ref = f"#{number}" if number else f"the `{other.branch}` PR"
            lines.append(f"**Stacked PR**: {ref} ({other.title}) builds on this one.")
    return lines + [""] if lines else []


def resolve_fork(git: Git, fork: str | None) -> dict:
    if not fork:
        submit, fork_option = hints.option("--submit", "SUBMIT=1"), hints.option(
            "--fork REMOTE", "FORK=<remote or URL>"
        )
        raise FatalError(f"{submit} needs {fork_option} (your fork; no write access to upstream is needed)")
    if re.match(r"^(https?://|git@|ssh://|file://|/)", fork):
        return {"push": fork, "label": "the fork URL", "owner": _owner_of(fork)}
    status, url, _ = git.try_run("remote", "get-url", fork)
    if status != 0:
        raise FatalError(
            f"no remote named {fork!r} in {git.workdir}; add it with `git remote add {fork} <your fork URL>`"
        )
    return {"push": fork, "label": f"remote {fork}", "owner": _owner_of(url)}


def _owner_of(url: str) -> str | None:
    match = re.search(r"github\.com[:/]([^/]+)/", url)
    return match.group(1) if match else None


def gh_command(group: Group, upstream: str, fork: dict | None, body: Path, number: int | None) -> list[str]:
    if number:
        return ["gh", "pr", "edit", str(number), "--repo", upstream, "--title", group.title, "--body-file", str(body)]
    head = (
        f"{fork['owner']}:{group.branch}"
        if fork and fork.get("owner")
        else (group.branch if fork else f"OWNER:{group.branch}")
    )
    return [
        "gh",
        "pr",
        "create",
        "--repo",
        upstream,
        "--base",
        "main",
        "--head",
        head,
        "--title",
        group.title,
        "--body-file",
        str(body),
    ]


def _run_gh(command: list[str], record: dict) -> None:
    if shutil.which("gh") is None:
        say(f"  gh is not installed; open the PR with: {shlex.join(command)}")
        return
    if subprocess.run(["gh", "auth", "status"], capture_output=True, check=False).returncode != 0:
        say(f"  gh is not logged in (gh auth login); then run: {shlex.join(command)}")
        return
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FatalError(f"gh failed: {(result.stderr.strip().splitlines() or ['no message'])[-1]}")
    if match := re.search(r"/pull/(\d+)", result.stdout):
        record["number"] = int(match.group(1))
        record["url"] = match.group(0)
    say(f"  {command[2]}d: {result.stdout.strip()}")


def _rerun_lines(group: Group) -> list[str]:
    try:
        return rerun_comment_lines(group.patches)
    except FatalError as exc:  # an unmapped file must not block the update; say so in the body
        return [f"# {exc}"]


def _base_of(git: Git, tip: str, count: int) -> str:
    return git.run("rev-parse", f"{tip}~{count}")


def _load_records(git: Git) -> dict:
    path = git.git_dir() / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _save_records(git: Git, records: dict) -> None:
    (git.git_dir() / RECORD_FILE).write_text(json.dumps(records, indent=2) + "\n")
