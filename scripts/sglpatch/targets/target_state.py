"""What sglpatch finds in a target before it acts: read once, as one typed value.

`read(target)` looks at every record sglpatch keeps in a target (a checkout's
`.git/sglpatch-state.json` and `.git/sglpatch-rebase/`, a package folder's
`.sglpatch/journal.json`), at what a killed run can leave behind (a half-written
state file, a journal folder without its journal, temporary files, git's lock
files) and at what another tool is doing there (a git merge, rebase, am or
cherry-pick in progress; a lock of some other git), and returns one of:

* `Pristine`: no sglpatch record;
* `Applied`: a series is applied (a checkout: on which branch, the records of a
  stack below it, whether HEAD is still where the apply left it);
* `Interrupted`: an apply or a revert was cut short (and the git locks it left);
* `RebaseInProgress`: a rebase waits for the user (`stopped`) or was cut short;
* `Foreign`: something sglpatch did not do and will not guess at (another
  tool's operation, a lock of another git, a state file damaged by hand):
  `seen` says what was found.

`leftovers` (on every state) are what a killed run left that `recover` tidies.
apply, revert, status and recover decide from this value alone; the states and
their transitions are drawn in docs/architecture.md ("Target states").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglpatch import hints
from sglpatch.errors import CorruptState, FatalError
from sglpatch.targets import journal, rebase_store
from sglpatch.targets.checkout_record import STATE_FILE, CheckoutRecord, read_record, state_path
from sglpatch.targets.git_locks import GitLock, classify, lock_files
from sglpatch.targets.journal import Journal
from sglpatch.targets.rebase_store import RebaseState
from sglpatch.targets.space import RESERVE
from sglpatch.targets.target import Target
from sglpatch.targets.write_states import INTERRUPTED, WriteState

APPLY, REVERT = "apply", "revert"
# What another tool leaves in the git dir while its operation waits for the user.
_OTHER_OPERATIONS = (
    ("rebase-merge", "a `git rebase`"),
    ("rebase-apply", "a `git rebase` or `git am`"),
    ("MERGE_HEAD", "a `git merge`"),
    ("CHERRY_PICK_HEAD", "a `git cherry-pick`"),
    ("REVERT_HEAD", "a `git revert`"),
    # a cherry-pick or revert of several commits keeps its list of commits still to go here, also after the
    # user committed the one that stopped (CHERRY_PICK_HEAD gone); a rebase's `git cherry-pick --abort` or
    # `--quit` would throw that list away
    ("sequencer", "a `git cherry-pick` or `git revert` of several commits"),
)
# What git leaves for the user's next `git commit`. Switching branches (apply, revert) deletes these files and
# keeps the staged changes, so the commit they prepare would land on the other branch without its message.
_PENDING_COMMITS = (
    ("SQUASH_MSG", "a `git merge --squash`"),
    ("MERGE_MSG", "a commit git prepared (`git cherry-pick -n`, `git revert -n`, a merge)"),
    ("AUTO_MERGE", "a commit git prepared (`git cherry-pick -n`, `git revert -n`, a merge)"),
)


@dataclass(frozen=True)
class Leftover:
    """Something a killed run left in the target: recover removes it; apply waits until then if it `blocks`."""

    path: Path
    what: str
    blocks: bool = True


@dataclass(frozen=True, kw_only=True)
class TargetState:
    target: Target
    leftovers: tuple[Leftover, ...] = ()

    @property
    def blocking_leftovers(self) -> list[Leftover]:
        return [left for left in self.leftovers if left.blocks]

    def refusal(self) -> str | None:
        """Why a command that writes a series must not start here (one line), or None when it may."""
        if self.blocking_leftovers:
            return f"an sglpatch run on {self.target.root} was interrupted; run {hints.recover(self.target.root)} to finish or undo it"
        return None

    def note(self) -> str | None:
        """What `status` says about the state beyond the series' patches, or None."""
        if self.blocking_leftovers:
            return f"an sglpatch run was cut short here; {hints.recover(self.target.root)} settles it"
        return None


@dataclass(frozen=True, kw_only=True)
class Pristine(TargetState):
    """No sglpatch record: nothing sglpatch applied is here."""


@dataclass(frozen=True, kw_only=True)
class Applied(TargetState):
    record: CheckoutRecord | None = None  # a checkout's record (its `stack` holds the series below a stacked apply)
    journal: Journal | None = None  # a package folder's journal
    on_branch: bool = True  # a checkout: HEAD is on the series branch
    at_head: bool = True  # a checkout: HEAD is at the commit the apply made

    @property
    def in_place(self) -> bool:
        """HEAD is where the apply (or rebase) left it (always, for a package folder)."""
        return self.on_branch and self.at_head

    def describe(self) -> str:
        if self.record is None:
            return f"applied ({len(self.journal.patches)} patches, journal in {journal.JOURNAL_DIR}/)"
        record = self.record
        how = f" (3-way on base {record.base[:12]})" if record.three_way and record.base else ""
        stacked = f"; {len(record.stack) - 1} more series below it" if record.before else ""
        where = "" if self.in_place else f"; HEAD is not {'at its last commit' if self.on_branch else 'on it'}"
        return f"applied{how} on branch {record.branch}{stacked}{where}"


@dataclass(frozen=True, kw_only=True)
class Interrupted(TargetState):
    """An apply or a revert was cut short: recover (or revert) takes the target back to as it was."""

    operation: str  # APPLY or REVERT
    record: CheckoutRecord | None = None
    journal: Journal | None = None
    locks: tuple[GitLock, ...] = ()  # git locks in the checkout: the killed run's own, or someone else's

    def refusal(self) -> str:
        return (
            f"an sglpatch {self.operation} on {self.target.root} was interrupted; "
            f"run {hints.recover(self.target.root)} to finish or undo it"
        )

    def note(self) -> str:
        locks = f" (it left {', '.join(lock.path.name for lock in self.locks)})" if self.locks else ""
        return f"an sglpatch {self.operation} was cut short here{locks}; {hints.recover(self.target.root)} settles it"


@dataclass(frozen=True, kw_only=True)
class RebaseInProgress(TargetState):
    rebase: RebaseState
    folder: Path
    locks: tuple[GitLock, ...] = ()

    @property
    def stopped(self) -> bool:
        return self.rebase.stopped is not None

    def refusal(self) -> str:
        root = self.target.root
        if self.stopped:
            return (
                f"{self.rebase.describe_stop()} in {root}; finish it ({hints.continue_rebase(root)}) "
                f"or undo it ({hints.abort_rebase(root)}) first"
            )
        return f"a rebase of {root} was interrupted; run {hints.recover(root)} to finish or undo it"

    def note(self) -> str:
        if self.stopped:
            root = self.target.root
            return f"{self.rebase.describe_stop()}; {hints.continue_rebase(root)} or {hints.abort_rebase(root)}"
        return f"an sglpatch rebase was cut short here; {hints.recover(self.target.root)} settles it"


@dataclass(frozen=True, kw_only=True)
class Foreign(TargetState):
    """Something sglpatch did not do here, and will not write over or guess at."""

    seen: str  # what was found, and what to do about it: one line

    def refusal(self) -> str:
        return self.seen

    def note(self) -> str:
        return self.seen


def read(target: Target) -> TargetState:
    """The state of `target`, read once; see the module docstring."""
    try:
        return _read_checkout(target) if target.is_git else _read_package(target)
    except CorruptState as exc:
        return Foreign(target=target, seen=str(exc))


def current_record(target: Target) -> CheckoutRecord | None:
    """A checkout's record as it is on disk, whatever the state: for a rebase writing the record that replaces
    it (the old one is kept inside it, `before`)."""
    return read_record(target)


def refuse_unless_settled(state: TargetState) -> None:
    """For a command about to write a series: refuse a target left mid-way, or one another tool is busy in."""
    why = state.refusal()
    if why:
        raise FatalError(why)


# -- checkout ---------------------------------------------------------------------------------


def _read_checkout(target: Target) -> TargetState:
    git = target.git
    git_dir, common = git.git_dir(), git.common_dir()
    leftovers = _checkout_leftovers(git_dir)
    locks = lock_files(git_dir, common)
    repo = [target.root, git_dir, common]
    folder = rebase_store.state_dir(git)
    rebase = rebase_store.load(folder)
    if rebase is not None:
        found = classify(locks, folder / "state.json", rebase.run, repo)
        return RebaseInProgress(target=target, leftovers=leftovers, rebase=rebase, folder=folder, locks=found)
    record = read_record(target)
    if record is not None and record.state in INTERRUPTED:
        found = classify(locks, state_path(target), record.run, repo)
        operation = APPLY if record.state == WriteState.APPLYING else REVERT
        return Interrupted(target=target, leftovers=leftovers, operation=operation, record=record, locks=found)
    if in_the_way := classify(locks, None, None, repo):
        return Foreign(target=target, leftovers=leftovers, seen=_foreign_lock(target, in_the_way))
    for name, operation in _OTHER_OPERATIONS:
        if (git_dir / name).exists():
            return Foreign(
                target=target,
                leftovers=leftovers,
                seen=f"{operation} is in progress in {target.root} ({git_dir / name}); finish or abort it first",
            )
    for name, operation in _PENDING_COMMITS:
        if (git_dir / name).exists():
            return Foreign(
                target=target,
                leftovers=leftovers,
                seen=f"{operation} waits to be committed in {target.root} ({git_dir / name}; a switch of branch "
                "would drop it); nothing was changed: commit it, or abandon it and delete that file, first",
            )
    leftovers += _stray_reserve(git_dir)  # an interrupted run's own is freed when it is settled
    if record is None:
        return Pristine(target=target, leftovers=leftovers)
    on_branch = git.current_branch() == record.branch
    at_head = git.rev_parse("HEAD") == record.head
    return Applied(target=target, leftovers=leftovers, record=record, on_branch=on_branch, at_head=at_head)


def _stray_reserve(git_dir: Path) -> tuple[Leftover, ...]:
    """The room to roll back with (space.py) of a run killed before it wrote its record, or after it wrote
    its last one."""
    reserve = git_dir / RESERVE
    return (Leftover(reserve, "the space a killed run set aside to roll back with"),) if reserve.exists() else ()


def _checkout_leftovers(git_dir: Path) -> tuple[Leftover, ...]:
    found = []
    half_written = git_dir / f"{STATE_FILE}.tmp"
    if half_written.exists():
        found.append(Leftover(half_written, "a half-written state file (a run was killed while writing it)"))
    deleting = git_dir / rebase_store.DELETING
    if deleting.exists():
        found.append(Leftover(deleting, "the state of a settled rebase whose deletion was cut short", blocks=False))
    return tuple(found)


def _foreign_lock(target: Target, locks: tuple[GitLock, ...]) -> str:
    lock = locks[0]
    if lock.holders:
        return f"{lock.path} is in use ({lock.holders[0]}): a git process works in {target.root}; wait for it to finish"
    return (
        f"{lock.path} exists, and no sglpatch run was interrupted here: a git process was killed in {target.root}; "
        "if no git runs there, delete the lock"
    )


# -- package folder -----------------------------------------------------------------------------


def _read_package(target: Target) -> TargetState:
    root = target.root
    if journal.has_leftover(root):
        scratch = Leftover(root / journal.JOURNAL_DIR, "what an interrupted run left (no journal)")
        return Pristine(target=target, leftovers=(scratch,))
    record = journal.read_journal(root)
    if record is None:
        return Pristine(target=target)
    if record.state in INTERRUPTED:
        operation = APPLY if record.state == WriteState.APPLYING else REVERT
        return Interrupted(target=target, operation=operation, journal=record)
    stray = tuple(Leftover(path, "a temporary file of a killed write") for path in journal.stray_files(root, record))
    return Applied(target=target, leftovers=stray, journal=record)
