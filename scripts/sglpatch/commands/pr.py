"""`sglpatch pr`: one upstream pull request per PR group of the series.

On the newest series line (--line to pick another), for each group in its
pr-groups.json: a group with a patch upstream already has (the line's
upstream.json records it, or the base has its change or marker) is left out,
saying why. Each other group's branch is the group's patches carried onto the
base (upstream/pr_branch.py: a clone's `main`, or --onto; a stacked group on top of the
group it depends on), patch by patch as `make rebase` reports them; its touched
files are checked with sglang's formatters and linters and its PR body is
written. Everything that can refuse (a conflict, a lint finding, a body that
breaks the body rules) is settled before any branch is written.

Dry run by default: nothing leaves the machine, and the exact `git push` and
`gh` commands are printed. `--submit` pushes each branch to the fork
(--force-with-lease against what was pushed before, kept under
refs/sglpatch/pushed/), then runs `gh pr create`, or `gh pr edit` for a PR
already open, with the range-diff against what was pushed before. A base made
from a wheel import shares no history with upstream: it renders the bodies, and
--submit refuses there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglpatch import hints
from sglpatch.commands.common import NEWEST_LINE, add_series_options, add_target_option, base_dir, load_line
from sglpatch.errors import CorruptState, FatalError
from sglpatch.git import Git, GitFailed, git_reason
from sglpatch.lines import Line, line_named, newest_line
from sglpatch.output import plural, say, show_path
from sglpatch.project import PROJECT_ROOT
from sglpatch.rebase.default_base import ensure_default_base
from sglpatch.rebase.replay import history_between, upstream_reason
from sglpatch.safety.durable import write_durably
from sglpatch.safety.interrupts import fault_point
from sglpatch.series import Patch, sha256_hex
from sglpatch.targets import PR_OWN_TIPS, PR_RECORDS, open_target
from sglpatch.upstream.hygiene import check_hygiene
from sglpatch.upstream.pr_body import Group, render_body
from sglpatch.upstream.pr_branch import PrBase, ReleaseCommits, imported_note, refuse_imported, resolve_base
from sglpatch.upstream.pr_groups import load_groups
from sglpatch.upstream.rerun import rerun_comment_lines

RECORD_FILE = PR_RECORDS
BRANCH_PREFIX = "sglpatch-pr/"
PUSHED_PREFIX = "refs/sglpatch/pushed/"
_BUILD_REF = "refs/sglpatch/pr-build/"


@dataclass
class Prepared:
    """One group's PR, made and checked, nothing written yet."""

    group: Group
    base: str  # the commit it is built on: upstream's, or the tip of the group it stacks on
    tip: str
    body: str
    previous: str | None  # what was pushed before, when it was
    range_diff: str | None
    branch_was: str | None = None  # the local branch's tip before this run (checked: pr's own), or None


def add_arguments(parser) -> None:
    add_target_option(parser, what="a git checkout of sglang to build the PR branches in")
    add_series_options(parser, line_default=NEWEST_LINE)
    parser.add_argument(
        "--onto", help="upstream ref to build the branches on (default: main of the clone's remote, else the pin's tag)"
    )
    parser.add_argument("--fork", help="your fork: a remote name in the checkout or a URL (needed with --submit)")
    parser.add_argument(
        "--fork-owner", help="the fork's GitHub owner, when FORK's URL does not say it (gh gets --head OWNER:BRANCH)"
    )
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
    if args.submit and args.sglang is None:  # the default base is a wheel import by construction: build nothing
        raise refuse_imported(f"the line's default base ({pin.tag})", pin.tag)

    def default_base() -> Path:
        return ensure_default_base(pin, line.default_base if line else base_dir(args))

    target = open_target(args.sglang if args.sglang is not None else default_base(), pin.project)
    if not target.is_git:
        raise FatalError("pr needs a git checkout of sglang to build branches in")
    git = target.git
    groups = [g for g in config["groups"] if not args.group or g.id in args.group]
    if args.group and len(groups) != len(args.group):
        raise FatalError(f"unknown group in {args.group}; known: {', '.join(g.id for g in config['groups'])}")
    groups = _not_held(groups)
    base = resolve_base(git, args.onto, pin, config["upstream"])
    if base.imported and args.submit:
        raise refuse_imported(base.name, base.imported)
    fork = _fork(git, args)
    say(f"{f'line {line.name}' if line else series.directory}: {plural(len(groups), 'PR group')}, on {base.label(git)}")
    if base.imported:
        say(imported_note(base))
    release = git.rev_parse(pin.base_rev)
    groups = _not_upstream(
        groups, config, line, git, base.commit, release and history_between(git, release, base.commit)
    )
    records = _with_existing(_load_records(git), args.existing)
    prepared = _prepare_all(git, groups, base, series.patches, pin, default_base, config, records)
    _refuse_moving_the_users_branches(git, prepared, records)
    _refuse_writing_over_edited_bodies(prepared, records, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    for pr in prepared:
        try:
            _publish(git, pr, config, records, fork, args)
        finally:  # what was pushed stays recorded, even when a later push fails
            _save_records(git, records)
    return 0


def _refuse_writing_over_edited_bodies(prepared: list, records: dict, out: Path) -> None:
    """A body file there that is neither the one pr wrote last (its digest in the records) nor the one it writes
    now was edited by hand or is a file of the user's: writing the body over it would lose that; refused before
    any branch moves."""
    edited = []
    for pr in prepared:
        path = out / f"{pr.group.id}.md"
        if not (path.exists() or path.is_symlink()):
            continue
        ours = {records.get(pr.group.id, {}).get("body_sha256"), sha256_hex(pr.body.encode("utf-8"))}
        if path.is_symlink() or not path.is_file() or sha256_hex(path.read_bytes()) not in ours:
            edited.append(path)
    if edited:
        advised: set[Path] = set()
        moves = ", ".join(hints.move_beside(path, advised) for path in edited)
        raise FatalError(
            f"{', '.join(show_path(p) for p in edited)} {'is' if len(edited) == 1 else 'are'} not the body pr wrote "
            f"(edited since, or a file of yours), and pr would write over {'it' if len(edited) == 1 else 'them'}; "
            f"nothing was changed: {moves} keeps {'it' if len(edited) == 1 else 'them'}, then run pr again"
        )


def _fork(git: Git, args) -> dict | None:
    """The fork to push to (with --submit or --fork), and, with --submit, its GitHub owner for gh's --head."""
    fork = resolve_fork(git, args.fork, args.fork_owner) if (args.submit or args.fork) else None
    if args.submit and not fork["owner"]:
        raise FatalError(
            f"cannot tell the GitHub owner of {fork['label']} from its URL; pass FORK_OWNER=<your GitHub user> "
            "(gh needs --head OWNER:BRANCH); nothing was pushed"
        )
    return fork


def _with_existing(records: dict, existing: list[str]) -> dict:
    for number in existing:
        group_id, _, pr = number.partition("=")
        if not pr.isdigit():
            raise FatalError(f"--existing takes GROUP=NUMBER, got {number!r}")
        records.setdefault(group_id, {})["number"] = int(pr)
    return records


def _not_held(groups: list[Group]) -> list[Group]:
    """The groups `pr` prepares: a held one is named with its reason and left out; a group on a held one is refused."""
    held = {g.id: g.held for g in groups if g.held}
    for group_id, why in held.items():
        say(f"{group_id}: held, no PR prepared: {why}")
    for group in groups:
        if not group.held and (on := [d for d in group.depends_on if d in held]):
            raise FatalError(f"group {group.id} stacks on the held group {on[0]}: hold it too, or send {on[0]}")
    return [g for g in groups if not g.held]


def _not_upstream(
    groups: list[Group], config: dict, line: Line | None, git: Git, onto: str, history: tuple[str, str] | None
) -> list[Group]:
    """The groups to prepare: a group with a patch upstream already has (or one it stacks on) is left out."""
    recorded = {_title_of(r["patch"]): r for r in (line.upstreamed() if line else [])}
    left_out: set[str] = set()
    kept = []
    for group in groups:
        reasons = [why for patch in group.patches if (why := _upstream_why(patch, recorded, git, onto, history))]
        blocked = [dep for dep in group.depends_on if dep in left_out]
        if reasons or blocked:
            left_out.add(group.id)
            because = reasons[0] if reasons else f"it stacks on {blocked[0]}, left out"
            say(f"{group.id}: no PR: {because}")
            continue
        kept.append(group)
    return kept


def _upstream_why(patch: Patch, recorded: dict, git: Git, onto: str, history) -> str | None:
    if record := recorded.get(_title_of(patch.name)):
        pr_number = f" (#{record['upstream_pr']})" if record.get("upstream_pr") else ""
        since = f" since sglang {record['release']}" if record.get("release") else ""
        return f"{patch.name} is upstream{pr_number}{since}, as upstream.json records"
    with tempfile.TemporaryDirectory(prefix="sglpatch-pr-") as scratch:  # never the checkout's own index
        why = upstream_reason(git.with_env(GIT_INDEX_FILE=str(Path(scratch) / "index")), onto, patch, history)
    if why:
        return f"{patch.name} is already upstream at {git.run('describe', '--tags', '--always', onto)}: {why}"
    return None


def _title_of(patch_name: str) -> str:
    """A patch file name without its number: the same patch keeps it from line to line."""
    return patch_name.split("-", 1)[-1]


def _prepare_all(
    git: Git, groups: list[Group], base: PrBase, patches: list[Patch], pin, default_base, config, records
) -> list[Prepared]:
    """Every group's branch carried onto the base, linted, and its body rendered, in memory and in the
    clone's object store only: a refusal leaves no branch and no ref behind."""
    built = ReleaseCommits(git, patches, pin, default_base, git.committer())
    bases: dict[str, str] = {}
    tips: dict[str, str] = {}
    try:
        for group in groups:
            bases[group.id] = _group_base(git, group, base, tips, config)
            onto = f"{group.depends_on[0]}'s branch" if group.depends_on else base.label(git)
            say(f"{group.id}: {plural(len(group.patches), 'patch')} onto {onto}")
            tips[group.id] = built.carry(group, bases[group.id], base)
        for group_id, tip in tips.items():
            built.copy_to(tip, _BUILD_REF + group_id)
    finally:
        built.close()
        for group_id in tips:
            git.try_run("update-ref", "-d", _BUILD_REF + group_id)
    prepared = []
    for group in groups:
        check_hygiene(git, bases[group.id], tips[group.id], group.id)
        prepared.append(_with_body(git, group, bases[group.id], tips[group.id], config, records))
    return prepared


def _refuse_moving_the_users_branches(git: Git, prepared: list[Prepared], records: dict) -> None:
    """A PR branch is pr's own while it is where pr left it (the tip it built, or pushed, last): one the user
    committed on (a review fix) is theirs, and moving it would drop those commits; one a worktree has checked out
    would have its commit changed under the work tree. Either refuses before any branch is written."""
    held = _checked_out(git)
    for pr in prepared:
        branch = BRANCH_PREFIX + pr.group.branch
        pr.branch_was = now = git.rev_parse(f"refs/heads/{branch}")
        if now is None or now == pr.tip:
            continue
        if f"refs/heads/{branch}" in held:
            where = held[f"refs/heads/{branch}"]
            raise FatalError(
                f"{pr.group.id}: branch {branch} is checked out in {where}, and make pr moves it to the rebuilt "
                f"branch; nothing was changed: switch that worktree to another branch (`git -C {shlex.quote(str(where))} switch "
                "--detach`), then run make pr again"
            )
        record = records.get(pr.group.id, {})
        own = {record.get(key) for key in PR_OWN_TIPS} | {git.rev_parse(PUSHED_PREFIX + pr.group.branch)}
        if now not in own:
            raise FatalError(
                f"{pr.group.id}: branch {branch} holds commits make pr did not leave there (at {now[:12]}), and "
                f"rebuilding it would drop them; nothing was changed: keep them under another name (`git -C "
                f"{git.workdir} branch -m {branch} my-{pr.group.branch}`), then run make pr again"
            )


def _checked_out(git: Git) -> dict[str, Path]:
    """The branches the worktrees of this repository have checked out: {ref: the worktree's path}."""
    held, where = {}, None
    for line in git.run_bytes("worktree", "list", "--porcelain", "-z").split(b"\0"):
        if line.startswith(b"worktree "):
            where = Path(os.fsdecode(line.removeprefix(b"worktree ")))
        elif line.startswith(b"branch ") and where is not None:
            held[os.fsdecode(line.removeprefix(b"branch "))] = where
    return held


def _group_base(git: Git, group: Group, base: PrBase, tips: dict[str, str], config: dict) -> str:
    if not group.depends_on:
        return base.commit
    dep = group.depends_on[0]
    found = tips.get(dep) or git.rev_parse(BRANCH_PREFIX + _group(config, dep).branch)
    if found is None:
        raise FatalError(f"group {group.id} depends on {dep}, whose branch is not built")
    return found


def _with_body(git: Git, group: Group, base: str, tip: str, config: dict, records: dict) -> Prepared:
    record = records.get(group.id, {})
    previous = git.rev_parse(PUSHED_PREFIX + group.branch) or (record.get("head") and git.rev_parse(record["head"]))
    range_diff = None
    if previous and previous != tip:
        old_base = record.get("base") if record.get("head") == previous else None
        old_base = old_base if old_base and git.rev_parse(old_base) else git.run("merge-base", previous, base)
        range_diff = git.run("range-diff", "--no-color", f"{old_base}..{previous}", f"{base}..{tip}")
    rerun = _rerun_lines(group) if record.get("number") else None
    body = render_body(group, PROJECT_ROOT, stack_lines(group, config, records), range_diff, rerun)
    return Prepared(group, base, tip, body, previous, range_diff)


def _publish(git: Git, pr: Prepared, config: dict, records: dict, fork: dict | None, args) -> None:
    """Write the branch and the body; push and run gh with --submit, else print what it would run."""
    group, record = pr.group, records.setdefault(pr.group.id, {})
    branch = BRANCH_PREFIX + group.branch
    body_path = args.out / f"{group.id}.md"
    body_path.write_text(pr.body, encoding="utf-8")
    record["body_sha256"] = sha256_hex(pr.body.encode("utf-8"))
    # recorded before the move: a run killed between the two leaves the branch at the tip it had, which the
    # record still names as pr's own (built_before), so the next run rebuilds it instead of refusing it
    record.update(built=pr.tip, built_before=pr.branch_was)
    _save_records(git, records)
    fault_point("pr: branch recorded")
    git.run("update-ref", f"refs/heads/{branch}", pr.tip, pr.branch_was or "")  # as checked, or not there
    fault_point("pr: branch moved")
    say(f"{group.id}: branch {branch} ({plural(len(group.patches), 'commit')})")
    say(f"  body: {body_path}")
    if pr.range_diff is not None:
        say(f"  changed since pushed ({pr.previous[:12]}), git range-diff against it:")
        for line in pr.range_diff.splitlines():
            say(f"    {line}")
    elif pr.previous:
        say(f"  unchanged since pushed ({pr.previous[:12]})")
    command = gh_command(group, config["upstream"], fork, body_path, record.get("number"))
    lease = f"--force-with-lease=refs/heads/{group.branch}:{pr.previous or ''}"
    push = ["push", lease, "-q", fork["push"] if fork else "FORK", f"{branch}:refs/heads/{group.branch}"]
    if not args.submit:
        say(f"  dry run, nothing pushed; it would push: {shlex.join(['git', '-C', str(git.workdir), *push])}")
        if not fork:
            say("  (FORK=<remote or URL> names your fork; gh then gets --head <its owner>:<branch>)")
        say(f"  dry run, nothing pushed; to {'update' if record.get('number') else 'open'} it: {shlex.join(command)}")
        return
    try:
        git.run(*push)
    except GitFailed as exc:
        raise FatalError(
            f"{group.id}: pushing {group.branch} to {fork['label']} failed ({git_reason(exc.stderr)}); "
            f"the fork's branch is not what make pr pushed before ({(pr.previous or 'nothing')[:12]}): look at it, "
            "and delete it there or pass --existing GROUP=NUMBER after fetching it"
        ) from None
    git.run("update-ref", PUSHED_PREFIX + group.branch, pr.tip)
    record.update(head=pr.tip, branch=group.branch, base=pr.base)
    say(f"  pushed {group.branch} to {fork['label']}")
    _run_gh(command, record)


def _group(config: dict, group_id: str) -> Group:
    return next(g for g in config["groups"] if g.id == group_id)


def stack_lines(group: Group, config: dict, records: dict) -> list[str]:
    lines = []
    for dep in group.depends_on:
        other = _group(config, dep)
        number = records.get(dep, {}).get("number")
        ref = f"#{number}" if number else f"the PR of branch `{other.branch}`, this branch's first commits"
        lines.append(f"**Stacked PR**: depends on {other.title} ({ref}); review and merge that one first.")
    for other in config["groups"]:
        if group.id in other.depends_on and not other.held:  # a held group sends no PR to name
            number = records.get(other.id, {}).get("number")
            ref = f"#{number}" if number else f"the `{other.branch}` PR"
            lines.append(f"**Stacked PR**: {ref} ({other.title}) builds on this one.")
    return lines + [""] if lines else []


def resolve_fork(git: Git, fork: str | None, owner: str | None = None) -> dict:
    if not fork:
        submit, fork_option = (
            hints.option("--submit", "SUBMIT=1"),
            hints.option("--fork REMOTE", "FORK=<remote or URL>"),
        )
        raise FatalError(f"{submit} needs {fork_option} (your fork; no write access to upstream is needed)")
    if re.match(r"^(https?://|git@|ssh://|file://|/)", fork):
        return {"push": fork, "label": "the fork URL", "owner": owner or _owner_of(fork)}
    status, url, _ = git.try_run("remote", "get-url", fork)
    if status != 0:
        raise FatalError(
            f"no remote named {fork!r} in {git.workdir}; add it with `git remote add {fork} <your fork URL>`"
        )
    return {"push": fork, "label": f"remote {fork}", "owner": owner or _owner_of(url)}


def _owner_of(url: str) -> str | None:
    match = re.search(r"github\.com[:/]([^/]+)/", url)
    return match.group(1) if match else None


def gh_command(group: Group, upstream: str, fork: dict | None, body: Path, number: int | None) -> list[str]:
    if number:
        return ["gh", "pr", "edit", str(number), "--repo", upstream, "--title", group.title, "--body-file", str(body)]
    owner = (fork or {}).get("owner") or "OWNER"
    return [
        "gh",
        "pr",
        "create",
        "--repo",
        upstream,
        "--base",
        "main",
        "--head",
        f"{owner}:{group.branch}",
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
    say(f"  running: {shlex.join(command)}")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FatalError(f"gh failed: {(result.stderr.strip().splitlines() or ['no message'])[-1]}")
    if match := re.search(r"/pull/(\d+)", result.stdout):
        record["number"] = int(match.group(1))
        record["url"] = match.group(0)
    say(f"  {'updated' if command[2] == 'edit' else 'opened'}: {result.stdout.strip()}")


def _rerun_lines(group: Group) -> list[str]:
    try:
        return rerun_comment_lines(group.patches)
    except FatalError as exc:  # an unmapped file must not block the update; say so in the body
        return [f"# {exc}"]


def _load_records(git: Git) -> dict:
    """What pr recorded: in the repository's common git dir, beside the branches and refs it names (a linked
    worktree's own git dir would hide them from a run in another worktree)."""
    path = git.common_dir() / RECORD_FILE
    if not path.is_file():
        return {}
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        records = exc
    if not isinstance(records, dict) or not all(isinstance(record, dict) for record in records.values()):
        raise CorruptState(
            f"{path} is corrupt ({records if isinstance(records, Exception) else 'not a record per group'}); "
            "nothing was changed: move it aside, then run make pr again (--existing GROUP=NUMBER names the PRs "
            "already open; what was pushed is kept under refs/sglpatch/pushed/)"
        )
    return records


def _save_records(git: Git, records: dict) -> None:
    """Written beside and renamed over (write_durably): a run cut short leaves the old record or the new."""
    write_durably(git.common_dir() / RECORD_FILE, (json.dumps(records, indent=2) + "\n").encode(), fault_points=False)
