"""The series' files as the work tree held them before an apply, byte for byte: taking the series out gives
back those bytes.

`git checkout` writes a file the way the configuration says now (core.autocrlf, .gitattributes eol and
filters), which need not be how the file was: in a checkout cloned with LF files and `core.autocrlf=true`
set since, a plain revert leaves the series' files CRLF. Apply records the blob id of each touched file's
bytes (storing those bytes as a git object when they are not the committed blob); a revert, an apply's own
roll-back and `recover`, once HEAD and the index are back, rewrite each file whose bytes differ.
"""

from __future__ import annotations

from sglpatch.git import blob_id
from sglpatch.output import say
from sglpatch.safety.durable import write_durably
from sglpatch.safety.interrupts import fault_point
from sglpatch.targets.ownership import give_back
from sglpatch.targets.target import Target, dirty_paths
from sglpatch.targets.write_check import head_mismatch, previous_head, tree_blobs


def record_worktree(target: Target, paths: list[str]) -> dict[str, str]:
    """Blob id of the bytes of each of `paths` that is a file in the work tree now."""
    committed = tree_blobs(target, "HEAD", paths)
    found = {}
    for path in paths:
        local = target.root / path
        if not local.is_file() or local.is_symlink():
            continue
        data = local.read_bytes()
        found[path] = blob_id(data)
        if found[path] != committed.get(path):  # bytes git has not got: keep them, for the way back
            found[path] = target.git.run_with_input(["hash-object", "-w", "--no-filters", "--stdin"], data)
    return found


def give_back_worktree(target: Target, recorded: dict[str, str], base: str | None) -> list[str]:
    """Rewrite each recorded file whose bytes differ from those recorded; returns those whose bytes are no
    longer in the repository (pruned by `git gc` since the apply): they stay as git wrote them. `base` is the
    commit the bytes went with: a file HEAD now holds in another version (the previous branch moved on, with a
    commit changing it) is left as git wrote it, so the work tree never undoes that commit."""
    lost, rewritten = [], []
    moved = _changed_since(target, base, list(recorded)) if base else set()
    for path, blob in sorted(recorded.items()):
        local = target.root / path
        if path in moved or not local.is_file() or local.is_symlink() or blob_id(local.read_bytes()) == blob:
            continue
        if target.git.try_run("cat-file", "-e", blob)[0] != 0:
            lost.append(path)
            continue
        wanted = target.git.run_bytes("cat-file", "blob", blob)
        write_durably(local, wanted, fault_points=False, mode=local.stat().st_mode & 0o7777)
        fault_point(f"checkout: {local.name} as the work tree had it")
        rewritten.append(path)
    _restat(target, rewritten)
    return lost


def back_as_it_was(target: Target, record) -> list[str]:
    """Once a switch back (or a roll-back) has moved HEAD and the index to where `record`'s apply found them: the
    series' files given back their recorded bytes, then what still differs from before the apply ([] if nothing).
    A file holding its recorded bytes is as it was, whatever git status says: a git writes it through the user's
    smudge filter and eol settings of the moment, and a clean filter under which the committed file is not as
    committed (a formatter, say) makes git status call any file git rewrote modified."""
    branch, commit = previous_head(target, record)
    if wrong := head_mismatch(target, branch, commit):
        return wrong
    give_back_worktree(target, record.worktree, record.base)
    dirty = dirty_paths(target, target.paths_or_package(record.touched))
    moved = _changed_since(target, record.base, dirty) if record.base else set()
    recorded = {path: blob for path, blob in record.worktree.items() if path in dirty and path not in moved}
    return [f"{path} is not as committed" for path in dirty if recorded.get(path) != _blob_at(target, path)]


def _blob_at(target: Target, path: str) -> str:
    """The blob id of the work tree's file at `path` ('' where there is none, or a link)."""
    local = target.root / path
    return blob_id(local.read_bytes()) if local.is_file() and not local.is_symlink() else ""


def _changed_since(target: Target, base: str, paths: list[str]) -> set[str]:
    """The paths HEAD holds otherwise than `base` (another blob, or none)."""
    then, now = tree_blobs(target, base, paths), tree_blobs(target, "HEAD", paths)
    return {path for path in paths if then.get(path) != now.get(path)}


def _restat(target: Target, paths: list[str]) -> None:
    """The index entries of files rewritten behind git's back still hold the size git wrote, and git calls a
    file whose size differs modified without reading it. Each that git would store as the blob its entry
    holds (its eol settings applied) is added again: the same blob, the file's new size and times. Without
    core.safecrlf: it refuses to add an LF file under core.autocrlf ("LF would be replaced by CRLF") though the
    blob is the entry's already, and the revert (and every recover after it) stopped there."""
    if not paths:
        return
    git = target.git
    indexed = _index_blobs(target, paths)
    cleaned = git.run_with_input(["hash-object", "--stdin-paths"], "".join(f"{p}\n" for p in paths).encode())
    same = [path for path, blob in zip(paths, cleaned.splitlines(), strict=True) if indexed.get(path) == blob]
    if same:
        git.run("-c", "core.safecrlf=false", "update-index", "-q", "--", *same)
        fault_point("checkout: index entries of the files given back refreshed")


def _index_blobs(target: Target, paths: list[str]) -> dict[str, str]:
    listed = target.git.run("ls-files", "-s", "-z", "--", *paths, strip=False)
    return {entry.split("\t", 1)[1]: entry.split()[1] for entry in filter(None, listed.split("\0"))}


def give_back_stats(target: Target, record) -> None:
    """The modes and owners `record` (a CheckoutRecord) keeps, after its git commands; a note for any owner this
    run could not give back."""
    left = give_back(target, record.stats, record.git_stats, record.base, record.touched)
    if left:
        say(f"note: {', '.join(left[:3])} now belong to you: only root can give them back to their owner")
