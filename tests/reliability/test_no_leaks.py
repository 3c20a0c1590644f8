"""Nothing leaks: no shell with user-controlled strings; no token, home path or environment value in output.

The source scan reads every module of the toolkit (those added later too) with
`ast`, so a new `shell=True` or string command fails here, not in review.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sglpatch
from testing.fault_harness import OPERATIONS, Lab

PACKAGE_DIR = Path(sglpatch.__file__).resolve().parent
RUNNERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


def shell_uses(source: str, filename: str = "<source>") -> list[str]:
    """Places that run a shell, or a command given as one string, in Python source."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        where = f"{filename}:{node.lineno}"
        for keyword in node.keywords:
            if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and not keyword.value.value):
                found.append(f"{where}: shell={ast.unparse(keyword.value)}")
        func = node.func
        dotted = (
            (func.value.id, func.attr) if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        )
        if dotted in SHELL_CALLS or (isinstance(func, ast.Name) and func.id in {"system", "popen"}):
            found.append(f"{where}: {ast.unparse(func)}()")
        runner = dotted is not None and dotted[0] == "subprocess" and dotted[1] in RUNNERS
        runner = runner or (isinstance(func, ast.Name) and func.id in RUNNERS - {"run", "call"})
        if (runner or (isinstance(func, ast.Attribute) and func.attr == "execute")) and node.args:
            if _is_string(node.args[0]):
                found.append(f"{where}: {ast.unparse(func)}() with a string command")
    for node in ast.walk(ast.parse(source, filename)):  # gitpython's global switch to run git through a shell
        if isinstance(node, ast.Assign) and any("USE_SHELL" in ast.unparse(t) for t in node.targets):
            found.append(f"{filename}:{node.lineno}: USE_SHELL assigned")
    return found


def _is_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_string(node.left) or _is_string(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "format"):
        return isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
    return False


def test_the_scan_finds_what_it_looks_for():
    bad = """
import os, subprocess
subprocess.run("git status", shell=True)
subprocess.run(["git", "status"], shell=flag)
subprocess.check_output(f"git log {rev}")
subprocess.Popen("ls " + path)
os.system("rm -rf " + path)
os.popen(cmd)
runner.execute(" ".join(args))
git.Git.USE_SHELL = True
"""
    assert len(shell_uses(bad)) == 9, shell_uses(bad)
    good = 'subprocess.run(["git", "status"], shell=False)\nrunner.execute(["git", *args])\ngit.run("log", "-1")\n'
    assert shell_uses(good) == []


def test_no_module_runs_a_shell_or_a_string_command():
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert len(modules) >= 15, "the scan should see the whole toolkit"
    found = [hit for path in modules for hit in shell_uses(path.read_text(), str(path.relative_to(PACKAGE_DIR)))]
    assert found == []


# -- output: run the commands with secrets in the environment --------------------------

SECRETS = {
    "GITHUB_TOKEN": "ghp_FAKEtoken0123456789abcdefABCDEF0123",
    "HF_TOKEN": "hf_FAKEtokenZYXWVUT9876543210",
    "AWS_SECRET_ACCESS_KEY": "FAKEsecretKEY/abcdefghij0123456789",
    "SGLPATCH_TEST_SECRET": "sglpatch-fake-secret-value-4242",
    "PIP_INDEX_URL": "https://fakeuser:fakepassword-7788@pypi.invalid/simple",
}


@pytest.fixture(scope="module")
def leak_lab(tmp_path_factory, base_repo, series_dir):
    home = tmp_path_factory.mktemp("home-of-a-user-4411")
    labs = {
        kind: Lab(kind, tmp_path_factory.mktemp(f"leak-{kind}"), base_repo, series_dir)
        for kind in ("checkout", "package")
    }
    return home, labs


def _collect(lab: Lab, home: Path) -> list[tuple[str, str]]:
    """Every message a user may see, from the commands in their success, refusal and interruption paths."""
    env = {**SECRETS, "HOME": str(home), "SGLPATCH_CACHE": str(home / ".cache" / "sglpatch")}
    runs: list[tuple[str, subprocess.CompletedProcess]] = []

    def run(label, *args, **extra):
        runs.append((label, lab.sglpatch(*map(str, args), **env, **extra)))

    apply = OPERATIONS["apply"]
    tree = lab.fresh("pristine")
    target = tree.target
    run("status", "status", "--sglang", target, "--patches", lab.patches)
    run("apply", *apply.argv(tree))
    run("apply again", *apply.argv(tree))
    run("recover (nothing)", "recover", "--sglang", target)
    run("revert", "revert", "--sglang", target)
    run("revert again", "revert", "--sglang", target)
    run("interrupted", *apply.argv(tree), SGLPATCH_FAULT_AT="2", SGLPATCH_FAULT_SIGNAL="INT")
    run("revert", "revert", "--sglang", target)
    run("killed", *apply.argv(tree), SGLPATCH_FAULT_AT="2", SGLPATCH_FAULT_SIGNAL="KILL")
    run("detect", *apply.argv(tree))
    run("recover", "recover", "--sglang", target)
    run("missing target", "apply", "--sglang", lab.workdir / "nowhere", "--patches", lab.patches)
    run("not sglang", "apply", "--sglang", lab.workdir, "--patches", lab.patches)
    if lab.kind == "checkout":
        run("bad branch", *apply.argv(tree), "--branch", "bad..name")
    bad_pin = lab.workdir / "bad-pin"
    subprocess.run(["cp", "-a", str(lab.patches), str(bad_pin)], check=True)
    (bad_pin / "pin.json").write_text(json.dumps({"sglang": SECRETS["SGLPATCH_TEST_SECRET"]}))
    run("corrupt pin", "apply", "--sglang", target, "--patches", bad_pin)
    return [(label, result.stdout + result.stderr) for label, result in runs]


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_messages_hold_no_secret_home_path_or_environment_value(leak_lab, kind):
    home, labs = leak_lab
    outputs = _collect(labs[kind], home)
    assert len(outputs) >= 14
    forbidden = {
        **{name: value for name, value in SECRETS.items()},
        "HOME": str(home),
        "~user": os.path.expanduser("~"),
    }
    for label, text in outputs:
        assert text.strip() or label == "killed", f"{label}: said nothing"
        assert "Traceback" not in text, f"{label}: {text}"
        for name, value in forbidden.items():
            if name == "~user" and value in ("/", "/root") and value + "/" not in text:
                continue
            assert value not in text, f"{label}: output holds {name}: {text!r}"
    assert sys.executable not in "".join(text for _, text in outputs)
