"""git is run in one place: a missing git is one refusal, and `-v` shows every call and its exit status."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sglpatch import cli
from sglpatch.git import Git, GitFailed, init_repo, set_verbose

# the least each command needs to get past its argument parsing
COMMAND_ARGS = {
    "rebase": ["--onto", "v0.5.15"],
    "export": ["--from", ".", "--base", "v0.5.14"],
    "leg-verdict": ["summary.json"],
}


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_without_git_on_path_every_command_refuses_in_one_line(tmp_path, command):
    empty_path = tmp_path / "bin-without-git"
    empty_path.mkdir()
    target = tmp_path / "untouched"
    target.mkdir()
    (target / "kept.txt").write_text("as it was\n")
    argv = [sys.executable, "-m", "sglpatch", command, *COMMAND_ARGS.get(command, [])]
    if command in ("apply", "revert", "recover", "status", "rebase", "pr"):
        argv += ["--sglang", str(target)]
    env = {"PATH": str(empty_path), "SGLPATCH_PROJECT": str(tmp_path)}  # clean never looks at this project's build/
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == f"sglpatch {command}: error: {result.stderr.split(': error: ', 1)[1]}"
    assert "git is not installed or not on PATH" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert sorted(p.name for p in target.iterdir()) == ["kept.txt"]


def test_verbose_prints_each_git_call_and_its_exit_status(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SGLPATCH_VERBOSE", "")  # restored after the test, as set_verbose sets it
    repo = init_repo(tmp_path / "repo")
    assert capsys.readouterr().err == ""  # quiet unless asked
    set_verbose(True)
    repo.try_run("rev-parse", "--verify", "--quiet", "no-such-ref")
    repo.run("status", "--porcelain")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"+ git -C {repo.workdir} rev-parse --verify --quiet no-such-ref  # exit 1",
        f"+ git -C {repo.workdir} status --porcelain  # exit 0",
    ]


def test_a_failed_git_call_names_the_whole_command_and_its_stderr(tmp_path, capsys, monkeypatch):
    init_repo(tmp_path)
    monkeypatch.setenv("SGLPATCH_VERBOSE", "1")
    repo = Git(tmp_path)
    with pytest.raises(GitFailed) as failure:
        repo.run("log", "-1", "--format=%H", "no-such-branch")
    message = str(failure.value)
    assert message.startswith(f"`git -C {tmp_path} log -1 --format=%H no-such-branch` failed (128): fatal: ")
    assert "no-such-branch" in message.split("failed (128):", 1)[1]
    assert "\n" not in message
    logged = capsys.readouterr().err.splitlines()
    assert logged[0].endswith("no-such-branch  # exit 128")
    assert logged[1].startswith("  | fatal: ")


def test_cli_verbose_flag_logs_the_calls_of_a_real_command(checkout, series_dir, sglpatch, monkeypatch):
    monkeypatch.setenv("SGLPATCH_VERBOSE", "")  # restored after the test, as set_verbose sets it
    code, out, err = sglpatch("-v", "status", "--sglang", checkout, "--patches", series_dir)
    assert code == 0, err
    calls = [line for line in err.splitlines() if line.startswith("+ git -C ")]
    assert calls and all(line.rsplit("# exit ", 1)[1].isdigit() for line in calls)
    assert any(" rev-parse " in line for line in calls)
