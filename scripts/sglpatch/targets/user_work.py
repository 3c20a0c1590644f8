"""What of the user's a checkout holds beyond what sglpatch made there: commits, edits, untracked files.

A command that would throw a checkout away and start again (the default base after patches/ changed) must
not advise it while the user's work is in it, and `clean` must not delete it: this names that work, in one
phrase, for the refusal.
"""

from __future__ import annotations

import json
import os

from sglpatch.errors import CorruptState, FatalError
from sglpatch.git import SGLPATCH_IDENTITY, Git
from sglpatch.output import plural
from sglpatch.targets.checkout_record import OBJECT_ID, CheckoutRecord, read_record
from sglpatch.targets.target import Target
from sglpatch.targets.target_state import Foreign, RebaseInProgress
from sglpatch.targets.target_state import read as read_state

_SHOWN = 3  # files named in a phrase; the rest are counted


def work_of_the_user(target: Target, record: CheckoutRecord) -> list[str]:
    """Phrases naming what HEAD and the work tree hold that the apply recorded in `record` did not make: commits
    not in the series branch it made, the branch HEAD is on when it is another, edits and untracked files."""
    git = target.git
    found = []
    branch = git.current_branch()
    if branch != record.branch:
        found.append(f"HEAD on {f'your branch {branch}' if branch else 'a detached commit'}")
    status, listed, _ = git.try_run("rev-list", "HEAD", f"^{record.head}") if record.head else (1, "", "")
    commits = listed.split() if status == 0 else []
    if commits:
        subject = git.run("log", "-1", "--format=%h %s", commits[0])
        found.append(f"{plural(len(commits), 'commit')} not made by sglpatch, the last {subject}")
    return found + _uncommitted(git)


def _uncommitted(git: Git) -> list[str]:
    """Phrases naming the work tree's edits and untracked files (not the ignored ones)."""
    # --no-renames: a rename is two names, the second with no status of its own
    changed = git.entries(
        "--no-optional-locks", "status", "--porcelain", "-z", "--no-renames", "--untracked-files=normal"
    )
    entries = [entry for entry in changed if len(entry) > 3]
    edits = [entry[3:] for entry in entries if not entry.startswith("??")] + _hidden_edits(git)
    untracked = [entry[3:] for entry in entries if entry.startswith("??")]
    return ([f"edits to {_some(edits)}"] if edits else []) + ([f"untracked {_some(untracked)}"] if untracked else [])


def _hidden_edits(git: Git) -> list[str]:
    """Edited files git status does not show: their index entry tells git not to look at them (`git update-index
    --assume-unchanged`, or `--skip-worktree`, which users set to keep an edit of theirs out of git's way), so their
    bytes are compared with the entry's here. A file not on disk is none (a sparse checkout leaves them out)."""
    entries = {}
    for entry in git.entries("ls-files", "-v", "-s", "-z"):
        meta, _, path = entry.partition("\t")
        tag, mode, blob, stage = (meta.split() + ["", "", "", ""])[:4]
        if (tag == "S" or tag.islower()) and stage == "0" and mode.startswith("100") and "\n" not in path:
            if (git.workdir / path).is_file() and not (git.workdir / path).is_symlink():
                entries[path] = blob
    if not entries:
        return []
    paths = list(entries)
    found = git.run("hash-object", "--stdin-paths", stdin=b"".join(os.fsencode(f"{path}\n") for path in paths)).split()
    return [path for path, blob in zip(paths, found, strict=True) if blob != entries[path]]


def _some(paths: list[str]) -> str:
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


def commits_past_the_series(target: Target, record: CheckoutRecord | None) -> list[str]:
    """The commits HEAD has on top of the series branch's last commit (the user's own), newest first."""
    if record is None or record.head is None:
        return []
    git = target.git
    head = git.rev_parse("HEAD")
    if head is None or head == record.head or not git.is_ancestor(record.head, head):
        return []
    return git.run("rev-list", f"{record.head}..{head}").split()


def refuse_commits_past_the_series(target: Target, record: CheckoutRecord | None, what: str) -> None:
    """For a command that carries only the series (`what` it does): refuse, in one line and changing nothing,
    when HEAD holds commits of the user's on top of it, which it would leave behind."""
    commits = commits_past_the_series(target, record)
    if not commits:
        return
    git = target.git
    subject = git.run("log", "-1", "--format=%h %s", commits[0])
    branch = git.current_branch()
    keep = f"they stay on {branch}" if branch else f"`git branch my-work {commits[0][:12]}` keeps them first"
    raise FatalError(
        f"HEAD is {plural(len(commits), 'commit')} of your own past the series on {record.branch} (the last: "
        f"{subject}), which {what} would leave behind; nothing was changed: start from the series' last commit "
        f"(`git checkout --detach {record.head[:12]}`; {keep}) and cherry-pick them after, or make them patches "
        "of the series first"
    )


# Refs whose commits sglpatch made (its checks, stand-ins, PR builds) or that live elsewhere too (a remote's);
# refs/sglpatch/backup/ is sglpatch's too, but holds what it kept of the user's (a rebase's resolution, commits
# made while one waited), and refs/stash is counted as stashes.
_ELSEWHERE = ("refs/remotes/", "refs/sglpatch/")
_KEPT_FOR_THE_USER = "refs/sglpatch/backup/"
# make pr's record (commands/pr.py) of the branches it built, in the common git dir: they hold the commits it made;
# each group's entry names the tips it left (built, the one before a move, pushed)
PR_RECORDS = "sglpatch-prs.json"
PR_OWN_TIPS = ("built", "built_before", "head")


def work_only_in(target: Target) -> list[str]:
    """Phrases naming what deleting the git checkout `target` would lose that sglpatch did not make there:
    commits that no ref of sglpatch's or of a remote holds, stashes, linked worktrees, edits and untracked
    files, an operation waiting for the user. Empty for a default base as sglpatch left it."""
    git = target.git
    state = read_state(target)
    found = []
    if isinstance(state, Foreign):
        found.append(state.seen)
    elif isinstance(state, RebaseInProgress) and state.stopped:
        found.append(state.rebase.describe_stop())
    linked, heads = _linked_worktrees(git)
    found += _commits_only_here(git, _recorded_heads(target) + _pr_tips(git), heads)
    stashes = git.run("stash", "list").splitlines()
    if stashes:
        found.append(plural(len(stashes), "stash"))
    if linked:
        found.append(f"{plural(len(linked), 'linked worktree')} ({_some(linked)})")
    return found + _uncommitted(git)


def _linked_worktrees(git: Git) -> tuple[list[str], list[str]]:
    """The folders of the linked worktrees but those git calls prunable, their folder gone (a check-patches
    killed, its temporary folder deleted since: nothing there to lose); and the HEAD of each, which goes with
    the repository."""
    listed = git.run("worktree", "list", "--porcelain", "-z", strip=False).split("\0\0")[1:]  # the first: HEAD's
    linked, heads = [], []
    for lines in (block.split("\0") for block in listed if block):
        if not any(line.startswith("prunable") for line in lines):
            linked.append(lines[0].removeprefix("worktree "))
        heads += [line.removeprefix("HEAD ") for line in lines if line.startswith("HEAD ")]
    return linked, [head for head in heads if git.rev_parse(head)]


def _recorded_heads(target: Target) -> list[str]:
    """The last commits of the series sglpatch applied or rebased here, and of those they replaced."""
    try:
        record = read_record(target)
    except CorruptState:
        return []  # read_state has named it
    return [each.head for each in record.stack if each.head] if record else []


def _pr_tips(git: Git) -> list[str]:
    """The tips make pr built or pushed here (a PR branch of a line's default base): its commits, made with the
    user's identity where git has one. None where its record is missing or corrupt: they count as the user's."""
    try:
        records = json.loads((git.common_dir() / PR_RECORDS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    records = records.values() if isinstance(records, dict) else []
    tips = [each.get(key) for each in records if isinstance(each, dict) for key in PR_OWN_TIPS]
    return [tip for tip in tips if isinstance(tip, str) and OBJECT_ID.fullmatch(tip)]


def _commits_only_here(git: Git, made: list[str], heads: list[str]) -> list[str]:
    rows = [line.split(" ", 1) for line in git.run("for-each-ref", "--format=%(objecttype) %(refname)").splitlines()]
    refs = [ref for _, ref in rows]
    theirs = {ref for ref in refs if ref.startswith(_ELSEWHERE) and not ref.startswith(_KEPT_FOR_THE_USER)}
    # sglpatch tags commits only, and fetches no tags: a tag object (its message), a tree or a blob is the user's
    tags = [ref.removeprefix("refs/tags/") for kind, ref in rows if kind != "commit" and ref not in theirs]
    found = [f"{plural(len(tags), 'tag')} of a message, tree or file of yours ({_some(tags)})"] if tags else []
    kept = [ref for ref in refs if ref not in theirs and ref != "refs/stash"]
    head = ["HEAD"] if git.rev_parse("HEAD") else []
    if not head and not kept:  # a repository with no commit yet
        return []
    made = [commit for commit in made if git.rev_parse(commit)]  # a record may outlive its commit
    known = [f"^{rev}" for rev in (*sorted(theirs), *made)]
    # sglpatch's own identity commits only for it (a release laid out from a wheel, or a series where git has
    # none): no user commits without one; but under backup/ it keeps the user's, which it commits where git has
    # none (a resolution: the patch's author, sglpatch's committer)
    backed = {row[0] for row in _listed(git, [ref for ref in kept if ref.startswith(_KEPT_FOR_THE_USER)], known)}
    ours = SGLPATCH_IDENTITY[1]
    commits = _listed(git, [*head, *heads, *kept], known)
    yours = [subject for sha, by, to, subject in commits if to != ours or sha in backed and by != ours]
    if yours:
        return [f"{plural(len(yours), 'commit')} not made by sglpatch, the last {yours[0]}", *found]
    held = [f"^{rev}" for rev in (*head, *heads, *kept)]
    lost = [subject for _, _, to, subject in _listed(git, _committed_here(git), known + held) if to != ours]
    if lost:
        found.insert(0, f"{plural(len(lost), 'commit')} of yours that only the reflog holds, the last {lost[0]}")
    return found


# reflog entries of a `git commit` (or merge) of the user's: sglpatch commits with commit-tree, and its one `git
# commit` (a resolution, `rebase --continue`) is logged "commit (cherry-pick)", its commit then the series'
_COMMITTED = ("commit:", "commit (initial):", "commit (amend):", "commit (merge):", "merge ")


def _committed_here(git: Git) -> list[str]:
    """The commits the user made here by `git commit` or `git merge`, as the reflogs name them: one they reset
    away from, or made on a detached HEAD and left, is held by no ref, and the reflog is how they get it back."""
    listed = git.run("reflog", "show", "--all", "--format=%H %gs")
    entries = (line.split(" ", 1) for line in listed.splitlines())
    return sorted({entry[0] for entry in entries if len(entry) == 2 and entry[1].startswith(_COMMITTED)})


def _listed(git: Git, revs: list[str], known: list[str]) -> list[tuple[str, ...]]:
    """(id, author email, committer email, short id and subject) of each commit of `revs` that no rev of
    `known` (^REV) has."""
    if not revs:
        return []
    # on stdin: a clone that fetched every pull request's ref holds more than one command line takes
    wanted = "".join(f"{rev}\n" for rev in (*revs, *known)).encode()
    # --ignore-missing: a reflog may name a commit `git gc` has pruned since
    listed = git.run("rev-list", "--ignore-missing", "--stdin", "--format=%H%x09%ae%x09%ce%x09%h %s", stdin=wanted)
    return [tuple(line.split("\t", 3)) for line in listed.splitlines() if not line.startswith("commit ")]
