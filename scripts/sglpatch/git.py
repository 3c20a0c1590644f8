"""The one place that drives git (through gitpython's command runner).

Commands never build a shell string: arguments go to git as a list. Inherited
GIT_* variables that would redirect git to another repository are dropped, so a
hook or an outer `git rebase --exec` cannot make us write somewhere else.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import git as gitpython

from sglpatch.errors import FatalError

_REDIRECTING_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)


class GitFailed(FatalError):
    """A git command we expected to work exited non-zero."""

    def __init__(self, args: list[str], status: int, stderr: str):
        last = (stderr.strip().splitlines() or ["(no message)"])[-1]
        super().__init__(f"git {args[0]} failed ({status}): {last}")
        self.status = status
        self.stderr = stderr


def clean_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTING_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    env.update(extra or {})
    return env


class Git:
    """git in one working directory, optionally with its own index file."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None):
        self.workdir = Path(workdir)
        self.env = dict(env or {})
        self._runner = gitpython.Git(str(self.workdir))

    def with_env(self, **extra: str) -> "Git":
        return Git(self.workdir, {**self.env, **extra})

    def run(self, *args: str, stdin: BinaryIO | None = None, strip: bool = True) -> str:
        status, out, err = self.try_run(*args, stdin=stdin, strip=strip)
        if status != 0:
            raise GitFailed(list(args), status, err)
        return out

    def try_run(self, *args: str, stdin: BinaryIO | None = None, strip: bool = True) -> tuple[int, str, str]:
        try:
            status, out, err = self._runner.execute(
                ["git", *args],
                istream=stdin,
                env=clean_environment(self.env),
                with_extended_output=True,
                with_exceptions=False,
                strip_newline_in_stdout=strip,
            )
        except gitpython.GitCommandNotFound as exc:
            raise FatalError("git is not installed or not on PATH") from exc
        return status, out, err

    def run_with_input(self, args: list[str], data: bytes) -> str:
        with tempfile.TemporaryFile() as stdin:
            stdin.write(data)
            stdin.seek(0)
            return self.run(*args, stdin=stdin)

    def run_bytes(self, *args: str) -> bytes:
        """Raw stdout, for blob contents that must round-trip byte for byte."""
        try:
            status, out, err = self._runner.execute(
                ["git", *args],
                env=clean_environment(self.env),
                with_extended_output=True,
                with_exceptions=False,
                as_process=False,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
            )
        except gitpython.GitCommandNotFound as exc:
            raise FatalError("git is not installed or not on PATH") from exc
        if status != 0:
            raise GitFailed(list(args), status, err.decode("utf-8", "replace"))
        return out

    # -- small porcelain used across commands -------------------------------------

    def rev_parse(self, rev: str) -> str | None:
        status, out, _ = self.try_run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        return out if status == 0 else None

    def current_branch(self) -> str | None:
        status, out, _ = self.try_run("symbolic-ref", "--quiet", "--short", "HEAD")
        return out if status == 0 else None

    def identity(self) -> tuple[str, str] | None:
        """The configured user.name and user.email, or None when either is unset."""
        name, email = self.try_run("config", "user.name"), self.try_run("config", "user.email")
        return (name[1], email[1]) if name[0] == 0 and email[0] == 0 else None

    def git_dir(self) -> Path:
        return Path(self.run("rev-parse", "--absolute-git-dir"))

    def toplevel(self) -> Path | None:
        status, out, _ = self.try_run("rev-parse", "--show-toplevel")
        return Path(out) if status == 0 else None


def init_repo(path: Path, bare: bool = False) -> Git:
    path.mkdir(parents=True, exist_ok=True)
    repo = Git(path)
    repo.run("init", "-q", *(["--bare"] if bare else []), "--initial-branch=main", ".")
    return repo


def blob_id(data: bytes) -> str:
    """git's object id for a file's bytes, without needing a repository."""
    header = f"blob {len(data)}\0".encode()
    return hashlib.sha1(header + data).hexdigest()
