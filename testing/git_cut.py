"""Cut a run inside one of git's own writes: a smudge filter and a reference-transaction hook that kill it.

sglpatch's fault points sit between git commands; this reaches inside them. A run
is started in a process group of its own with `environment(...)`: through
GIT_CONFIG_* (no file in the target changes) every git it starts gets

* a smudge filter on every path (`core.attributesFile`), which git runs while it
  writes a file into the work tree under the index lock: by then it has removed
  the file's old version and not yet written the new one;
* a `reference-transaction` hook (`core.hooksPath`), run in state "prepared"
  while git holds the lock of every ref it is about to update.

Each of those events in the target repository (`SGLPATCH_GIT_CUT_REPO`; the
scratch workspaces do not count) is one point: listed in SGLPATCH_GIT_CUT_TRACE
("N<tab>inside `git …`: what"), and at point SGLPATCH_GIT_CUT_AT the script sends
SIGKILL to its whole process group, which is the sglpatch run, its git and itself:
what `kill -9` of a run mid `git checkout` does. The filter passes the content
through unchanged. It is a shell script: a rebase's `git checkout` runs it for
hundreds of files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

FILTER = "sglpatchcut"

# $1: "smudge PATH" (the filter) or "reference-transaction STATE" (the hook, refs on stdin).
_SCRIPT = r"""#!/bin/sh
kind=$1
if [ "$kind" = smudge ]; then what="writing $2 (smudge)"; else
    refs=$(while read -r old new ref; do printf '%s ' "$ref"; done)
    [ "$2" = prepared ] || exit 0
    what="${refs% } locked (reference-transaction prepared)"
fi
point() {
    [ "$(pwd -P)" = "$SGLPATCH_GIT_CUT_REPO" ] || return 0
    n=$(cat "$SGLPATCH_GIT_CUT_COUNT" 2>/dev/null || echo 0)
    n=$((n + 1))
    echo "$n" > "$SGLPATCH_GIT_CUT_COUNT"
    if [ -n "$SGLPATCH_GIT_CUT_TRACE" ]; then
        command=git pid=$PPID
        for _ in 1 2 3 4; do
            line=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || break
            case "$line" in git\ *|*/git\ *) command="git ${line#* }"; break ;; esac
            pid=$(sed 's/.*) [A-Za-z] \([0-9]*\).*/\1/' "/proc/$pid/stat")
        done
        command=$(printf '%s' "$command" | sed 's/^git\( -c [^ ]*\)*/git/')  # the command, not its -c settings
        printf '%s\tinside `%s`: %s\n' "$n" "${command% }" "$what" >> "$SGLPATCH_GIT_CUT_TRACE"
    fi
    [ "$n" != "$SGLPATCH_GIT_CUT_AT" ] || kill -KILL 0
}
if [ "$kind" = smudge ]; then
    content="$SGLPATCH_GIT_CUT_COUNT.$$"  # beside the count, in the run's folder: gone with it
    cat > "$content"
    point
    cat "$content" && rm -f "$content"
else
    point
fi
"""


def install(folder: Path) -> Path:
    """Write the script, the hooks folder and the attributes file under `folder`; returns `folder`."""
    (folder / "hooks").mkdir(parents=True, exist_ok=True)
    script = folder / "git-cut.sh"
    script.write_text(_SCRIPT)
    script.chmod(0o755)
    hook = folder / "hooks" / "reference-transaction"
    hook.write_text(f'#!/bin/sh\nexec "{script}" reference-transaction "$@"\n')
    hook.chmod(0o755)
    (folder / "attributes").write_text(f"* filter={FILTER}\n")
    return folder


def environment(folder: Path, repo: Path, counter: Path, trace: Path | None = None, at: int = 0) -> dict[str, str]:
    """The variables that make every git of a run call the script, counting points in `counter`."""
    config = [
        ("core.hooksPath", str(folder / "hooks")),
        (f"filter.{FILTER}.smudge", f'"{folder / "git-cut.sh"}" smudge %f'),
    ]
    config.append(("core.attributesFile", str(folder / "attributes")))
    env = {"GIT_CONFIG_COUNT": str(len(config))}
    for number, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{number}"], env[f"GIT_CONFIG_VALUE_{number}"] = key, value
    env.update(SGLPATCH_GIT_CUT_REPO=str(repo.resolve()), SGLPATCH_GIT_CUT_COUNT=str(counter))
    if trace is not None:
        env["SGLPATCH_GIT_CUT_TRACE"] = str(trace)
    if at:
        env["SGLPATCH_GIT_CUT_AT"] = str(at)
    return env


def run_cli(args, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The CLI in a session of its own, with ``env`` (from `environment`) beside this process's: the cut kills its
    whole process group (the run, its git, itself), not the test."""
    return subprocess.run(
        [sys.executable, "-m", "sglpatch", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
        start_new_session=True,
    )


class EachPoint:
    """One command cut at each of its points in turn, on a repository put back as it was before each cut.

    `whole()` runs it uncut (it must succeed) and lists its points; `cut_at(n)` restores the repository and runs
    it again, killed at point n. Whatever the caller checks between them is its own."""

    def __init__(self, args, repo: Path, scratch: Path):
        self.args, self.repo, self.saved = args, repo, scratch / "saved"
        self.cut, self.trace, self.count = install(scratch / "cut"), scratch / "trace", scratch / "count"
        subprocess.run(["cp", "-a", str(repo), str(self.saved)], check=True)

    def whole(self) -> list[str]:
        done = run_cli(self.args, environment(self.cut, self.repo, self.count, trace=self.trace))
        assert done.returncode == 0, done.stderr
        return self.trace.read_text().splitlines()

    def restore(self) -> None:
        """The repository as it was before the first run."""
        shutil.rmtree(self.repo)
        subprocess.run(["cp", "-a", str(self.saved), str(self.repo)], check=True)

    def cut_at(self, point: int) -> None:
        self.restore()
        self.count.unlink(missing_ok=True)
        cut = run_cli(self.args, environment(self.cut, self.repo, self.count, at=point))
        assert cut.returncode == -9, (point, cut.returncode, cut.stderr)
