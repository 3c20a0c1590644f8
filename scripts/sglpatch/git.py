"""The one place that runs git: the git command line, through one small runner.

Why the CLI and not GitPython: every step here is a plumbing command whose exact
argv, exit status and stderr are what a user needs to see when it goes wrong, and
a subprocess runner shows exactly those (`sglpatch -v` / `make ... V=1` prints
each call). It also cannot fail at import time: a missing git is found by
`require_git` and refused in one line like any other refusal.

Commands never build a shell string: arguments go to git as a list. Inherited
GIT_* variables that would redirect git to another repository are dropped, so a
hook or an outer `git rebase --exec` cannot make us write somewhere else.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

from sglpatch.errors import FatalError

VERBOSE_VARIABLE = "SGLPATCH_VERBOSE"
_REDIRECTING_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    # where git stops looking for the repository above a folder: naming a checkout, it hid that checkout from
    # the check that a package folder inside it is its (an editable install), which apply then wrote as a folder
    "GIT_CEILING_DIRECTORIES",
)
# ... and those that change what git writes or matches under the toolkit's own options: GIT_DIFF_OPTS beats
# format-patch's `--unified=3` (a rebase or export wrote the series with the user's context, or none), and the
# pathspec variables turn the toolkit's `-- '*.py'` into a name no file has (a rebase's check that each patch
# compiles then saw no file) or its file names into patterns
_RESHAPING_VARS = (
    "GIT_DIFF_OPTS",
    "GIT_EXTERNAL_DIFF",
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
    # the object format of a repository `git init` makes: the toolkit's own (its scratch workspaces, the default
    # bases) are SHA-1, as the pins' blob ids and the user's checkouts they borrow objects from; under `sha256`
    # every apply, status, rebase and drift failed in the scratch's `read-tree`, with no word of why
    "GIT_DEFAULT_HASH",
)
_URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")
# Who sglpatch's own commits are by: the scratch commits only it sees (a workspace, a stand-in, the series as
# commits), and the committer of those it makes on a user's branch when git has no identity there.
SGLPATCH_IDENTITY = ("sglpatch", "sglpatch@localhost")
_IDENT = re.compile(r"^(.*) <([^<>]*)> \d+ [+-]\d{4}$")
_fallback_said = False
# Every git we start leaves the user's repository to the user: a `git fetch` (or commit) would otherwise start
# `git gc --auto` when it is due, which packs refs before it goes to the background and repacks after.
_NO_AUTO_GC = ("-c", "gc.auto=0", "-c", "maintenance.auto=false")
# Every git we start looks at the work tree itself: a file system monitor (core.fsmonitor) that missed an edit
# made git take an edited series file for clean, and apply's checkout wrote over the edit.
_NO_MONITOR = ("-c", "core.fsmonitor=false")
# Every `git log` we run prints what its format asks for and nothing else: with the user's `log.showSignature=true`
# git ran gpg on a signed commit (upstream's merges are) and wrote gpg's lines into stdout before it, where a
# rebase of a DeepGEMM line read its new pin's date and a refusal the subject of a commit of the user's.
_NO_SIGNATURES = ("-c", "log.showSignature=false")
# Every message we read or write is UTF-8, as the patches' text is: the user's `i18n.commitEncoding=ISO-8859-1` gave
# the commits apply and a rebase make an `encoding ISO-8859-1` header over UTF-8 text, and the rebase wrote the series
# again from them decoded as Latin-1 (`Zoë` became `ZoÃ«` in From, subject and body); `i18n.logOutputEncoding` would
# re-encode what `git log` prints.
_UTF8_MESSAGES = ("-c", "i18n.commitEncoding=UTF-8", "-c", "i18n.logOutputEncoding=UTF-8")
# Every `git apply` we run applies a patch as written: the user's `apply.whitespace=fix` (or `strip`) took the
# trailing spaces off its added lines (apply wrote another text than the patch's, and a rebase wrote the patch again
# without them), and `apply.ignoreWhitespace` let it land where only the context's spacing matched.
APPLY = ("apply", "--whitespace=nowarn", "--no-ignore-whitespace")
# For apply's and revert's switch of branch (and a rebase's writes, `Git.sparse_as_it_is`): a `git checkout`
# applies the sparse-checkout patterns to the whole work tree, and where the user set them without applying them
# (or git left files it could not remove) the switch there and back would delete the files they keep. Without
# them git writes only what the switch changes.
KEEP_SPARSE_AS_IT_IS = ("-c", "core.sparseCheckout=false")
# The commits sglpatch makes on a user's branch (a rebase's cherry-picks) are the patches' own: no hook of the
# user's runs in them (core.hooksPath or .git/hooks: a prepare-commit-msg or commit-msg hook would write its text
# into every rewritten patch), and no editor opens. Nor in a roll-back's `git checkout COMMIT -- PATHS`, which puts
# bytes back: a post-checkout hook that rewrites a series file there would make the roll-back (and recover) fail
# for ever.
NO_HOOKS = ("-c", f"core.hooksPath={os.devnull}")


class GitFailed(FatalError):
    """A git command we expected to work exited non-zero: the message names the whole command; git's own
    stderr only under -v (which has printed it already), as sglpatch's refusals are sglpatch's words."""

    def __init__(self, command: str, status: int, stderr: str):
        why = f"failed: {killed_by(status)}" if status < 0 else f"failed ({status}): {git_reason(stderr)}"
        super().__init__(f"`{command}` {why}")
        self.status = status
        self.stderr = stderr


_DISK_FULL = re.compile(r"No space left on device|Out of diskspace|Disk quota exceeded")


def disk_full(stderr: str) -> bool:
    """Whether git failed because the file system is full."""
    return bool(_DISK_FULL.search(stderr))


def git_reason(stderr: str) -> str:
    """What to say about a failed git call: a full disk by name; its message under -v; otherwise where to find it."""
    if disk_full(stderr) and not os.environ.get(VERBOSE_VARIABLE):
        return "No space left on device"
    if os.environ.get(VERBOSE_VARIABLE):
        return " ".join(stderr.split()) or "(no message)"
    return "`sglpatch -v` (make ... V=1) shows git's message"


def error_line(stderr: str) -> str:
    """git's own words for why a command failed: its first `error:` or `fatal:` line, with the names it lists under
    it (`Your local changes to the following files would be overwritten by merge:` and a tab before each file),
    else `git_reason`."""
    lines = stderr.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(("error:", "fatal:"))), None)
    if at is None:
        return git_reason(stderr)
    listed = [line.strip() for line in itertools.takewhile(lambda line: line.startswith("\t"), lines[at + 1 :])]
    return " ".join([lines[at].split(":", 1)[1].strip(), ", ".join(listed)]).strip()


def killed_by(status: int) -> str:
    """What a signal that ended git (a negative status) means: SIGXFSZ is a file past `ulimit -f`."""
    try:
        name = signal.Signals(-status).name
    except ValueError:
        return f"git was killed by signal {-status}"
    if -status == signal.SIGXFSZ:
        return f"git was killed by {name}, a file past the file-size limit (`ulimit -f`)"
    return f"git was killed by {name}"


def require_git() -> None:
    if shutil.which("git") is None:
        raise FatalError("git is not installed or not on PATH; install git (2.39 or newer) and run this again")


def new_run() -> None:
    """A command starts (the CLI can run several in one process): its notes are said again."""
    global _fallback_said
    _fallback_said = False


def set_verbose(on: bool) -> None:
    """Log every git call on stderr; the variable carries it to the sglpatch processes this one starts."""
    if on:
        os.environ[VERBOSE_VARIABLE] = "1"


# Who the toolkit names as a commit's author and committer (a patch's From, the user's identity as `git var` gives
# it): handed to git as UTF-8, as git keeps names. Python writes the environment in the locale's encoding: under
# `tr_TR.ISO-8859-9` a patch by `Şükrü` was committed (and a rebase wrote the series again) as `Þükrü` (git takes
# bytes that are not UTF-8 for Latin-1), and under any such locale a name past its charset (`Łukasz` under
# ISO-8859-1) failed apply, rebase and pr with a Python traceback.
_IDENTITY_VARS = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def _environment_bytes(extra: dict[str, str]) -> dict[bytes, bytes]:
    """`clean_environment(extra)` as git gets it: the user's variables as they came (os.fsencode gives their bytes
    back), the identities the toolkit names in UTF-8 (surrogateescape: bytes git printed are given back as they were).
    """
    named = {key for key in _IDENTITY_VARS if key in extra}
    return {
        os.fsencode(key): value.encode("utf-8", "surrogateescape") if key in named else os.fsencode(value)
        for key, value in clean_environment(extra).items()
    }


def clean_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTING_VARS + _RESHAPING_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    # The objects as they are: a `git replace` ref for a blob the series touches would have apply build on the
    # replacement's bytes, and revert's `git checkout` write them (or refuse for ever: not as committed).
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env.update(extra or {})
    return env


def shown_command(workdir: Path, args: tuple[str, ...] | list[str]) -> str:
    """The git call as a user could paste it: `git -C DIR ARGS`, home as ~ and no password from a URL."""
    text = shlex.join(["git", "-C", str(workdir), *args])
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        text = text.replace(home, "~")
    return _URL_CREDENTIALS.sub("://***@", text)


class Git:
    """git in one working directory, optionally with its own environment (an index file, an identity)."""

    def __init__(
        self, workdir: Path, env: dict[str, str] | None = None, options: tuple[str, ...] = (), *, one_repo: bool = False
    ):
        self.workdir = Path(workdir)
        self.env = dict(env or {})
        self.options = options  # git's own options before every command (`-c key=value`)
        # one_repo: the caller holds this object for one command on one checkout, whose .git the toolkit never
        # moves: its git dir and common dir are asked of git once (thousands of `rev-parse`s a test run)
        self._repo_dirs: dict[tuple[str, ...], Path] | None = {} if one_repo else None

    def with_env(self, **extra: str) -> Git:
        return Git(self.workdir, {**self.env, **extra}, self.options)

    def call(self, args: tuple[str, ...], stdin: bytes | BinaryIO | None = None) -> tuple[int, bytes, bytes]:
        """Run `git ARGS` here: (exit status, stdout, stderr) as bytes. Every other method goes through this."""
        feed = stdin if isinstance(stdin, bytes) else None
        try:
            result = subprocess.run(
                ["git", *_NO_AUTO_GC, *_NO_MONITOR, *_NO_SIGNATURES, *_UTF8_MESSAGES, *self.options, *args],
                cwd=self.workdir,
                env=_environment_bytes(self.env),
                input=feed,
                stdin=None if feed is not None else (stdin or subprocess.DEVNULL),
                capture_output=True,
                check=False,
            )
        except FileNotFoundError as exc:
            if shutil.which("git") is None:
                raise FatalError("git is not installed or not on PATH") from None
            raise FatalError(f"cannot run git in {self.workdir}: {exc.strerror}") from None
        if os.environ.get(VERBOSE_VARIABLE):
            _log(self.workdir, args, result.returncode, result.stderr)
        return result.returncode, result.stdout, result.stderr

    def run(self, *args: str, stdin: bytes | BinaryIO | None = None, strip: bool = True) -> str:
        status, out, err = self.try_run(*args, stdin=stdin, strip=strip)
        if status != 0:
            raise GitFailed(shown_command(self.workdir, args), status, err)
        return out

    def try_run(self, *args: str, stdin: bytes | BinaryIO | None = None, strip: bool = True) -> tuple[int, str, str]:
        status, out, err = self.call(args, stdin)
        text = out.decode("utf-8", "surrogateescape")
        if strip and text.endswith("\n"):
            text = text[:-1]
        return status, text, err.decode("utf-8", "replace")

    def run_with_input(self, args: list[str], data: bytes) -> str:
        return self.run(*args, stdin=data)

    def run_bytes(self, *args: str) -> bytes:
        """Raw stdout, for blob contents and file names that must round-trip byte for byte."""
        status, out, err = self.call(args)
        if status != 0:
            raise GitFailed(shown_command(self.workdir, args), status, err.decode("utf-8", "replace"))
        return out

    # -- small porcelain used across commands -------------------------------------

    def paths(self, *args: str) -> list[str]:
        """The paths a listing command prints, as they are: with -z, since without it git quotes a name past ASCII
        or with a quote or newline (`"caf\\303\\251.py"`), a path no file has. Decoded as Python decodes file
        names (os.fsdecode, as `try_path`): under a locale that is not UTF-8 (ISO-8859-1, say) a name decoded as
        UTF-8 is another file's once Python encodes it again, and an edit there went unseen."""
        command, *rest = args  # -z before the rest: after a `--` it would be a path
        return self.entries(command, "-z", *rest)

    def entries(self, *args: str) -> list[str]:
        """The entries of a listing run with -z (`ls-files -s`, `ls-tree`, `status --porcelain`), each decoded as
        Python decodes file names, as `paths`: the name in each is the file's own under any locale."""
        return split_entries(self.run_bytes(*args))

    def rev_parse(self, rev: str) -> str | None:
        status, out, _ = self.try_run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        return out if status == 0 else None

    def current_branch(self) -> str | None:
        """HEAD's branch by its name (not `--short`'s, which is `heads/main` where a tag `main` is there too)."""
        status, out, _ = self.try_run("symbolic-ref", "--quiet", "HEAD")
        return out.removeprefix("refs/heads/") if status == 0 else None

    def committer(self) -> tuple[str, str]:
        """Who commits on the user's branch here: the committer git itself would take (user.name/user.email,
        GIT_COMMITTER_*, EMAIL), else sglpatch's own identity, said once per run."""
        status, out, _ = self.try_run("var", "GIT_COMMITTER_IDENT")
        if status == 0 and (match := _IDENT.match(out)):
            return match.group(1), match.group(2)
        _say_fallback_once()
        return SGLPATCH_IDENTITY

    def as_committer(self) -> Git:
        """This git, committing (a cherry-pick, say) as `committer()`: the author stays the commit's own."""
        name, email = self.committer()
        return self.with_env(GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)

    def committing(self) -> Git:
        """This git making sglpatch's commit on the user's branch (a cherry-pick): as `committer()`, the author
        the commit's own, without the user's hooks and without an editor."""
        committer = self.as_committer().with_env(GIT_EDITOR="true")
        return Git(committer.workdir, committer.env, (*self.options, *NO_HOOKS))

    def as_sglpatch(self) -> Git:
        """This git with sglpatch's own identity as author and committer: for commits only the toolkit sees."""
        name, email = SGLPATCH_IDENTITY
        return self.with_env(
            GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email
        )

    def git_dir(self) -> Path:
        return self._repo_dir("rev-parse", "--absolute-git-dir")

    def common_dir(self) -> Path:
        """Where the objects and the shared refs are: the git dir itself, except in a `git worktree`."""
        return self._repo_dir("rev-parse", "--path-format=absolute", "--git-common-dir")

    def _repo_dir(self, *args: str) -> Path:
        """`_path(ARGS)`, asked once where this object is for one checkout (`one_repo`); a failure is never kept."""
        if self._repo_dirs is None:
            return self._path(*args)
        if args not in self._repo_dirs:
            self._repo_dirs[args] = self._path(*args)
        return self._repo_dirs[args]

    def toplevel(self) -> Path | None:
        return self.try_path("rev-parse", "--show-toplevel")[1]

    def try_path(self, *args: str) -> tuple[int, Path | None, str]:
        """`git ARGS` printing one path: (exit status, the path or None, stderr). The path's bytes are decoded
        as Python decodes file names (os.fsdecode), so any byte, and a newline, comes back as it is on disk."""
        status, out, err = self.call(args)
        path = Path(os.fsdecode(out[:-1] if out.endswith(b"\n") else out)) if status == 0 else None
        return status, path, err.decode("utf-8", "replace")

    def _path(self, *args: str) -> Path:
        status, path, err = self.try_path(*args)
        if path is None:
            raise GitFailed(shown_command(self.workdir, args), status, err)
        return path

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.try_run("merge-base", "--is-ancestor", older, newer)[0] == 0

    def sparse_as_it_is(self) -> tuple[str, ...]:
        """For a rebase's checkouts, resets and picks, which (unlike apply's switch) change files anywhere in the
        tree: sparse patterns the work tree does not follow (set by hand, every file still on disk: no index entry
        skip-worktree) are not applied (KEEP_SPARSE_AS_IT_IS), or a rebase there and back takes the files outside
        them off the disk; a sparse checkout in effect is left to git, which keeps it."""
        if self.try_run("config", "--bool", "core.sparseCheckout")[1] != "true":
            return ()
        entries = self.run_bytes("ls-files", "-t", "-z").split(b"\0")
        return () if any(entry.startswith(b"S ") for entry in entries) else KEEP_SPARSE_AS_IT_IS


def _say_fallback_once() -> None:
    global _fallback_said
    if not _fallback_said:
        _fallback_said = True
        name, email = SGLPATCH_IDENTITY
        print(
            f"note: git has no identity here (user.name/user.email): the commits sglpatch makes on your branch keep "
            f"each patch's author, with `{name} <{email}>` as committer (`git config --global user.email ...` "
            "and user.name set yours)",
            file=sys.stderr,
            flush=True,
        )


def _log(workdir: Path, args: tuple[str, ...], status: int, stderr: bytes) -> None:
    print(f"+ {shown_command(workdir, args)}  # exit {status}", file=sys.stderr, flush=True)
    if status != 0 and stderr.strip():
        for line in stderr.decode("utf-8", "replace").rstrip().splitlines():
            print(f"  | {line}", file=sys.stderr, flush=True)


def split_entries(listed: bytes) -> list[str]:
    """The NUL-separated entries of a `-z` listing, decoded as Python decodes file names (os.fsdecode)."""
    return [os.fsdecode(entry) for entry in listed.split(b"\0") if entry]


_EXCLUDE_FILE = "# files this repository ignores beside its .gitignore files, one pattern a line\n"


def own_repo(path: Path) -> Git:
    """git in a repository of the toolkit's own (a scratch workspace, a releases store): no hook of the user's
    runs there. Their `core.hooksPath` is config, not template: a reference-transaction hook in it that refuses
    updates in a repository with no remote failed every apply in the scratch's `update-ref`, with no word of why."""
    return Git(path, options=NO_HOOKS)


def init_repo(path: Path, bare: bool = False) -> Git:
    """A repository of the toolkit's own (a scratch workspace, a default base, a releases store). Made from no
    template: the user's (`GIT_TEMPLATE_DIR`, `init.templateDir`) put their hooks in it, and a
    reference-transaction hook there that refuses (one guarding the user's branches) failed every apply and rebase
    in the scratch's `update-ref`, with no word of why."""
    path.mkdir(parents=True, exist_ok=True)
    repo = own_repo(path)
    repo.run("init", "-q", "--template=", *(["--bare"] if bare else []), "--initial-branch=main", ".")
    # what git's own template gives and a user of a default base writes to (`echo scratch/ >> .git/info/exclude`)
    info = (path if bare else path / ".git") / "info"
    info.mkdir(exist_ok=True)
    (info / "exclude").write_text(_EXCLUDE_FILE)
    return repo


def blob_id(data: bytes) -> str:
    """git's object id for a file's bytes, without needing a repository."""
    header = f"blob {len(data)}\0".encode()
    return hashlib.sha1(header + data).hexdigest()
