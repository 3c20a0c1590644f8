"""What `--help` and the Makefile say is what the commands do (issue 36: defaults that did not exist)."""

from __future__ import annotations

import re
import subprocess

import pytest

from sglpatch import cli
from sglpatch.project import PROJECT_ROOT


def help_of(capsys, *command: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines where it likes


def test_each_command_says_its_own_defaults(capsys):
    drift = help_of(capsys, "drift")
    assert "--sglang" not in drift and "--line TAG the series line, e.g. v0.5.23 (default: every line)" in drift
    assert "(default: every line)" in help_of(capsys, "check-patches")
    for newest in ("pr", "rerun"):
        text = help_of(capsys, newest)
        assert "(default: the newest line)" in text and "matching the target" not in text, text
    assert "--sglang PATH a git checkout of sglang to build the PR branches in" in help_of(capsys, "pr")
    rebase = help_of(capsys, "rebase")
    assert "--sglang PATH a git checkout of sglang (default:" in rebase and "package folder" not in rebase
    assert "a git checkout of sglang or an installed sglang package folder" in help_of(capsys, "apply")


def test_the_command_list_says_recover_settles_a_rebase_too(capsys):
    assert "finish or undo an interrupted apply, revert or rebase" in help_of(capsys)


def test_every_phony_target_of_the_makefile_has_a_recipe():
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    phony = {t for line in re.findall(r"^\.PHONY:(.*)$", makefile, re.M) for t in line.split()}
    defined = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    assert phony - defined == set(), f"declared .PHONY without a rule: {sorted(phony - defined)}"
    listed = subprocess.run(["make", "-s", "help"], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout
    assert "test-toolkit" not in listed and "test-patched" not in listed
