"""The target: a checkout or package folder, what state it is in (read_state, the one reader), what a series would do to it (make_plan), and its records and safe writes.
May import: the core only; commands and the other capabilities import it through the names below, its face.

Every other module here is private to the package (tests/toolkit/test_layers.py holds it), but for `rebase_store`,
the rebase's own state: the rebase engine reads and writes it, and it lives here because read_state must see a
rebase in progress.

Named `targets/`, not `target/`: `target/` is the build output of Cargo and Maven, and the ignore files made for
them hide it at any depth (GitHub's Python.gitignore has the line too, for PyBuilder), so an editor, a search or a
linter that honours a global or copied ignore file would pass over the heart of the toolkit. No tool writes its
output to `targets/`.
"""

from sglpatch.targets.checkout_apply import apply_to_checkout
from sglpatch.targets.checkout_record import STATE_FILE, CheckoutRecord
from sglpatch.targets.checkout_record import write_state as write_record
from sglpatch.targets.checkout_undo import undo_checkout
from sglpatch.targets.killed_git import remove_locks_of_a_cut_run, settle_rebase_git
from sglpatch.targets.package_writes import apply_to_package, journal_progress, settle_package, undo_package
from sglpatch.targets.plan import ApplyPlan, make_plan
from sglpatch.targets.space import RESERVE, make_reserve, room_to_switch_back
from sglpatch.targets.target import (
    Target,
    branch_refusal,
    busy,
    checkout_at,
    dirty_paths,
    open_target,
    target_lock,
    working_run,
    writing,
)
from sglpatch.targets.target_state import (
    Applied,
    Foreign,
    Interrupted,
    Pristine,
    RebaseInProgress,
    TargetState,
    current_record,
    refuse_unless_settled,
)
from sglpatch.targets.target_state import read as read_state
from sglpatch.targets.user_work import (
    PR_OWN_TIPS,
    PR_RECORDS,
    commits_past_the_series,
    refuse_commits_past_the_series,
    work_of_the_user,
    work_only_in,
)
from sglpatch.targets.write_check import tree_blobs

__all__ = [
    # what a target is, and one sglpatch run at a time on it
    "Target",
    "open_target",
    "checkout_at",
    "writing",
    "target_lock",
    "working_run",
    "busy",
    # what state it is in, read once (docs/architecture.md, "Target states")
    "read_state",
    "refuse_unless_settled",
    "TargetState",
    "Pristine",
    "Applied",
    "Interrupted",
    "RebaseInProgress",
    "Foreign",
    # what apply would do, tried in a workspace first
    "make_plan",
    "ApplyPlan",
    # the writes, all or nothing, and how they are undone or settled after a kill
    "apply_to_checkout",
    "undo_checkout",
    "apply_to_package",
    "undo_package",
    "settle_package",
    "settle_rebase_git",
    "remove_locks_of_a_cut_run",
    "journal_progress",
    # what a checkout holds: edits, the user's own work, a commit's files
    "dirty_paths",
    "branch_refusal",
    "work_of_the_user",
    "work_only_in",
    "PR_RECORDS",
    "PR_OWN_TIPS",
    "commits_past_the_series",
    "tree_blobs",
    # what the rebase builds on: it writes a checkout's record and keeps room to switch back, as apply does
    "CheckoutRecord",
    "write_record",
    "current_record",
    "refuse_commits_past_the_series",
    "STATE_FILE",
    "RESERVE",
    "make_reserve",
    "room_to_switch_back",
]
