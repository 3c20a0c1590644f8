"""What of the user's a checkout holds beyond what sglpatch made there: commits, edits, untracked files.

A command that would throw a checkout away and start again (the default base after patches/ changed) must
not advise it while the user's work is in it: this names that work, in one phrase, for the refusal.
"""

from __future__ import annotations

from sglpatch.errors import FatalError
from sglpatch.output import plural
from sglpatch.targets.checkout_record import CheckoutRecord
from sglpatch.targets.target import Target

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
    changed = git.run("--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=normal", strip=False)
    entries = [entry for entry in changed.split("\0") if len(entry) > 3]
    edits = [entry[3:] for entry in entries if not entry.startswith("??")]
    untracked = [entry[3:] for entry in entries if entry.startswith("??")]
    if edits:
        found.append(f"edits to {_some(edits)}")
    if untracked:
        found.append(f"untracked {_some(untracked)}")
    return found


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
