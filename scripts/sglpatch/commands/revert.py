"""`sglpatch revert`: take the series back out, leaving the target as it was."""

from __future__ import annotations

import json

from sglpatch import journal
from sglpatch.commands.apply import STATE_FILE
from sglpatch.commands.common import add_target_option, resolve_target
from sglpatch.errors import FatalError
from sglpatch.output import say
from sglpatch.plan import dirty_paths
from sglpatch.target import Target, target_lock


def add_arguments(parser) -> None:
    add_target_option(parser)
    parser.add_argument("--force", action="store_true", help="package folders: restore even files edited since apply")


def run(args) -> int:
    target = resolve_target(args)
    with target_lock(target):
        if target.is_git:
            _revert_checkout(target)
        else:
            restored = journal.restore(target.root, force=args.force)
            say(f"reverted {target.root}: restored {len(restored)} files byte for byte")
    return 0


def _revert_checkout(target: Target) -> None:
    git = target.git
    state_path = git.git_dir() / STATE_FILE
    if not state_path.is_file():
        raise FatalError(f"{target.root} has no series applied by sglpatch: nothing to revert")
    record = json.loads(state_path.read_text())
    branch, previous, head = record["branch"], record["previous"], record["head"]
    if git.current_branch() != branch:
        raise FatalError(f"{target.root} is not on {branch} (the series branch); switch to it or revert by hand")
    if git.run("rev-parse", "HEAD") != head:
        raise FatalError(f"{branch} has commits after the series; revert by hand so they are not lost")
    dirty = dirty_paths(target, record.get("touched", []) or ["python/sglang"])
    if dirty:
        raise FatalError(
            f"uncommitted changes under the series' files: {', '.join(dirty[:5])}; commit or stash them first"
        )
    git.run("checkout", "-q", previous)
    git.run("branch", "-q", "-D", branch)
    state_path.unlink()
    say(f"reverted {target.root}: back on {previous}, branch {branch} removed")
