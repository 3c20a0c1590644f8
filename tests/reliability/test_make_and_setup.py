"""The Makefile and the set-up, as a new user meets them (issue 16): odd paths, a wrong first Python,
reports that must not edit committed files, and test dependencies that must be declared."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglpatch.git import Git
from sglpatch.lines import default_patch_dir
from sglpatch.project import PROJECT_ROOT
from sglpatch.series import load_series
from testing import tmp_root
from testing.fault_harness import default_sigint
from testing.sglang_trees import as_tester
from testing.tree_bytes import tree_state

MAKE = shutil.which("make")
STAMP = ".venv/.tool-stamp"


def make(*args: str, cwd: Path = PROJECT_ROOT, **kwargs) -> subprocess.CompletedProcess:
    if MAKE is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(cwd), *args], capture_output=True, text=True, **kwargs
    )


# -- item 4: paths with spaces --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["checkout", "package"])
def test_make_apply_and_revert_take_a_path_with_spaces(tmp_path, base_repo, kind):
    """`make apply SGLANG="/tmp/my sglang/sglang"`: one argument, applied and reverted byte for byte."""
    root = tmp_path / "my sglang; touch pwned & 'quoted' $(shell touch pwned) ${HOME}"  # issue 48 C: taken as written
    if kind == "checkout":
        subprocess.run(["git", "clone", "-q", str(base_repo), str(root / "sglang")], check=True)
        for key, value in (("user.name", "Target User"), ("user.email", "target@example.com")):
            subprocess.run(["git", "-C", str(root / "sglang"), "config", key, value], check=True)
    else:
        shutil.copytree(base_repo / "python" / "sglang", root / "sglang")
    target = root / "sglang"
    before = tree_state(target)
    applied = make("-o", STAMP, "apply", f"SGLANG={target}")
    assert applied.returncode == 0, applied.stderr
    count = len(load_series(default_patch_dir()).patches)
    assert f"applied {count} patches to {target}" in applied.stdout, applied.stdout
    assert not (PROJECT_ROOT / "pwned").exists() and not (tmp_path / "pwned").exists()
    reverted = make("-o", STAMP, "revert", f"SGLANG={target}")
    assert reverted.returncode == 0, reverted.stderr
    assert tree_state(target) == before


def test_a_make_expression_in_a_value_is_text_never_run(tmp_path):
    """Issue 48 C: make ran `$(shell ...)` in SGLANG, and a path holding `$(...)` became another path."""
    for value in (f"{tmp_path}/x$(shell touch {tmp_path}/pwned)", f"{tmp_path}/$(HOME)"):
        for args, env in (([f"SGLANG={value}"], None), ([], os.environ | {"SGLANG": value})):  # command line, env
            result = make("-n", "-o", STAMP, "apply", *args, env=env)
            assert result.returncode == 0, result.stderr
            assert f"--sglang={shlex.quote(value)}" in result.stdout, (args, result.stdout)
    assert not (tmp_path / "pwned").exists()


def test_a_relative_path_is_the_callers_under_make_dash_c(tmp_path, base_repo):
    """Issue 48 I: `make -C PROJECT apply SGLANG=build/sglang` from another folder used the project's
    build/sglang ("already applied", about the wrong tree)."""
    caller = tmp_path / "caller"
    subprocess.run(["git", "clone", "-q", str(base_repo), str(caller / "build" / "sglang")], check=True)
    script = 'cd "$0" && exec "$1" -C "$2" -o "$3" apply SGLANG=build/sglang'
    result = subprocess.run(
        ["sh", "-c", script, str(caller), MAKE or "make", str(PROJECT_ROOT), STAMP], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert f"to {caller / 'build' / 'sglang'} on branch" in result.stdout, result.stdout
    assert Git(caller / "build" / "sglang").current_branch().startswith("sglpatch/")


def test_a_value_that_looks_like_an_option_is_the_options(tmp_path):
    """Issue 48 Q: `make apply SGLANG=-x` said "argument --sglang: expected one argument"."""
    result = make("-o", STAMP, "apply", "SGLANG=-x", cwd=PROJECT_ROOT)
    assert result.returncode == 2 and "target -x does not exist" in result.stderr, result.stderr
    assert "expected one argument" not in result.stderr


def test_a_hint_names_what_the_user_typed(tmp_path, base_repo):
    """Issue 36: `make apply` on a drifted checkout said "try --3way"; a make user gives THREEWAY=1."""
    target = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", str(base_repo), str(target)], check=True)
    touched = load_series(default_patch_dir()).patches[0].touched_paths[0]
    with open(target / touched, "a") as edited:
        edited.write("# a local edit\n")
    as_tester(Git(target)).run("commit", "-qam", "a local edit")
    made = make("-o", STAMP, "apply", f"SGLANG={target}")
    assert made.returncode == 2 and "differs from the pin" in made.stderr, made.stderr
    assert "try THREEWAY=1" in made.stderr and "--3way" not in made.stderr, made.stderr
    typed = subprocess.run(
        [sys.executable, "-m", "sglpatch", "apply", "--sglang", str(target)], capture_output=True, text=True
    )
    assert typed.returncode == 2 and "try --3way" in typed.stderr and "THREEWAY" not in typed.stderr, typed.stderr


# -- item 7: a .venv of the wrong Python ------------------------------------------------------


@pytest.fixture
def makefile_copy(tmp_path):
    """The project's Makefile and pyproject.toml alone in a folder, so .venv there is a throwaway."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    return root


def fake_python(path: Path, version: str) -> Path:
    """An interpreter that says it is `version` and fails every version check, as Python 3.10 does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] && echo "Python {version}" && exit 0\necho False\nexit 1\n')
    path.chmod(0o755)
    return path


def test_a_venv_of_an_old_python_is_removed_and_rebuilt(makefile_copy):
    venv = makefile_copy / ".venv"
    fake_python(venv / "bin" / "python", "3.10.12")
    (venv / "pyvenv.cfg").write_text("version = 3.10.12\n")
    (venv / ".tool-stamp").write_text("")
    result = make("-n", "apply", cwd=makefile_copy)
    assert "was made with a Python older than 3.11" in result.stdout + result.stderr, result
    assert not venv.exists()
    assert "-m venv .venv" in result.stdout, result.stdout  # the dry run shows the rebuild


def test_an_old_python_is_refused_before_a_venv_is_made(makefile_copy, tmp_path):
    old = fake_python(tmp_path / "bin" / "python3.10", "3.10.12")
    result = make(STAMP, f"PYTHON={old}", cwd=makefile_copy)
    assert result.returncode != 0
    assert "is not Python 3.11 or newer" in result.stderr and "PYTHON=python3.11" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (makefile_copy / ".venv").exists()


def test_distclean_removes_the_venv_and_clean_keeps_it(makefile_copy):
    shutil.copytree(PROJECT_ROOT / "scripts", makefile_copy / "scripts")  # clean is sglpatch's, run without the venv
    (makefile_copy / ".venv" / "bin").mkdir(parents=True)
    (makefile_copy / ".venv" / "pyvenv.cfg").write_text("")
    shutil.copy(sys.executable, makefile_copy / ".venv" / "bin" / "python")  # a working 3.11+, kept by the check
    (makefile_copy / "build").mkdir()
    assert make("clean", cwd=makefile_copy).returncode == 0
    assert (makefile_copy / ".venv").exists() and not (makefile_copy / "build").exists()
    assert make("distclean", cwd=makefile_copy).returncode == 0
    assert not (makefile_copy / ".venv").exists()
    assert make("clean", f"PYTHON={sys.executable}", cwd=makefile_copy).returncode == 0  # no venv, no build/


def test_clean_and_distclean_keep_a_checkout_with_work_of_yours(makefile_copy, base_repo):
    """`make clean` was `rm -rf build`: a commit of the user's in build/sglang went with it, and distclean's too."""
    shutil.copytree(PROJECT_ROOT / "scripts", makefile_copy / "scripts")
    base = makefile_copy / "build" / "sglang"
    subprocess.run(["git", "clone", "-q", str(base_repo), str(base)], check=True)
    (base / "mine.txt").write_text("mine\n")
    result = make("distclean", f"PYTHON={sys.executable}", cwd=makefile_copy)
    assert result.returncode == 2 and "untracked mine.txt" in result.stderr and "make clean" in result.stderr, result
    assert (base / "mine.txt").read_text() == "mine\n"


# -- item 9: drift writes under build/ unless asked, and says what it downloaded ----------------


@pytest.fixture
def drift_project(tmp_path, monkeypatch, series_dir):
    root = tmp_path / "project"
    (root / "docs" / "drift").mkdir(parents=True)
    (root / "docs" / "drift" / "drift.md").write_text("committed report\n")
    monkeypatch.setattr("sglpatch.commands.drift.PROJECT_ROOT", root)
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    return root


def _last_report_line(root: Path) -> str:
    return (root / "build" / "drift" / "drift.md").read_text().strip().splitlines()[-1]


def test_drift_writes_under_build_and_leaves_docs_alone(sglpatch, drift_project, series_dir, wheel_path):
    shutil.copy(wheel_path, drift_project.parent / "cache" / "wheels" / wheel_path.name)
    code, out, err = sglpatch("drift", "--releases", "0.5.14", "--patches", series_dir)
    assert code == 0, err
    assert (drift_project / "docs" / "drift" / "drift.md").read_text() == "committed report\n"
    assert sorted(p.name for p in (drift_project / "docs" / "drift").iterdir()) == ["drift.md"]
    assert "no wheel downloaded" in _last_report_line(drift_project)
    assert f"wrote {drift_project / 'build' / 'drift' / 'drift.md'}" in out


@pytest.mark.network
def test_drift_says_how_many_wheels_it_downloaded(sglpatch, drift_project, series_dir):
    code, _, err = sglpatch("drift", "--releases", "0.5.14", "--patches", series_dir)
    assert code == 0, err
    assert "1 wheel downloaded from PyPI" in _last_report_line(drift_project), _last_report_line(drift_project)


@pytest.mark.network
def test_drift_counts_a_wheel_downloaded_again_over_a_bad_cached_copy(sglpatch, drift_project, series_dir, wheel_path):
    """Issue 36: the count was the cache's listing before and after, so a wheel downloaded again over a bad copy
    of the same name (a cut download) was not counted. Now each download counts."""
    (drift_project.parent / "cache" / "wheels" / wheel_path.name).write_bytes(b"cut short")
    code, _, err = sglpatch("drift", "--releases", "0.5.14", "--patches", series_dir)
    assert code == 0, err
    assert "Checked 1 release in" in _last_report_line(drift_project)
    assert "(1 wheel downloaded from PyPI)" in _last_report_line(drift_project), _last_report_line(drift_project)


def test_make_drift_writes_docs_only_with_docs_1():
    recipe = make("-n", "-o", STAMP, "drift")
    assert recipe.returncode == 0 and "--out docs/drift" not in recipe.stdout, recipe.stdout
    asked = make("-n", "-o", STAMP, "drift", "DOCS=1")
    assert "--out docs/drift" in asked.stdout, asked.stdout


# -- item 10: what the tests import is declared ---------------------------------------------------

OWN_TEST_MODULES = {
    "conftest",
    "testing",
    "cpu_sglang",
    "p12_support",
    "p34_support",
}  # testing/: the test scaffolding package


def _imports(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_package_the_toolkit_tests_import_is_declared():
    """tests/toolkit, tests/reliability and tests/ci run from `pip install -e '.[test]'` alone (PyYAML was not declared)."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    declared |= {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["test"]}
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for folder in ("toolkit", "reliability", "ci"):
        for name in _imports(PROJECT_ROOT / "tests" / folder):
            if name in sys.stdlib_module_names or name in OWN_TEST_MODULES or name in ("sglpatch", "__future__"):
                continue
            dists = {canonicalize_name(d) for d in providers.get(name, [])}
            if name == "torch":  # the GPU-bundle driver tests use it when present; it comes from the sglang CPU set
                continue
            if not dists & declared:
                missing[name] = sorted(dists) or ["not installed"]
    assert not missing, f"imported by the tests but not declared in pyproject.toml: {json.dumps(missing)}"


def _pins() -> dict[str, str]:
    lines = (PROJECT_ROOT / "ci" / "requirements-sglang-cpu.txt").read_text().splitlines()
    return {
        canonicalize_name(m.group(1)): m.group(2)
        for m in map(re.compile(r"([A-Za-z0-9_.-]+)==(\S+)").match, lines)
        if m
    }


@pytest.mark.network
def test_cpu_requirements_agree_with_what_torch_from_pypi_requires():
    """From PyPI alone torch 2.13.0 (Linux x86_64, CPython 3.11) requires triton==3.7.1: the set pinned 3.6.0,
    which resolved only beside this machine's local CPU torch (issue 16 item 6). Reads the wheel's metadata
    (PEP 658, a few KB) instead of downloading GBs; the full pip resolution is in the README."""
    pins = _pins()
    assert "torchvision" not in pins and pins["transformers"] == "5.8.1"  # cpu-testing.md traps
    page = urllib.request.urlopen("https://pypi.org/simple/torch/", timeout=60).read().decode()
    wheel = f"torch-{pins['torch']}-cp311-cp311-manylinux_2_28_x86_64.whl"
    [url] = {m.split("#")[0] for m in re.findall(r'href="([^"]*/' + re.escape(wheel) + r'[^"]*)"', page)}
    metadata = urllib.request.urlopen(url + ".metadata", timeout=60).read().decode()
    env = {"platform_system": "Linux", "sys_platform": "linux", "python_version": "3.11", "extra": ""}
    exact = {}
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: "):
            req = Requirement(line.removeprefix("Requires-Dist: "))
            if (req.marker is None or req.marker.evaluate(env)) and len(req.specifier) == 1:
                spec = next(iter(req.specifier))
                if spec.operator == "==":
                    exact[canonicalize_name(req.name)] = spec.version
    assert exact.get("triton"), exact
    clashes = {name: (version, pins[name]) for name, version in exact.items() if name in pins and pins[name] != version}
    assert not clashes, f"torch {pins['torch']} from PyPI requires (name: (torch wants, we pin)): {clashes}"


def test_torch_index_installs_a_cpu_torch_first():
    recipe = make("-n", "-B", "-o", STAMP, ".venv/.sglang-cpu-stamp", "TORCH_INDEX=https://example.invalid/whl/cpu")
    assert recipe.returncode == 0, recipe.stderr
    lines = recipe.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "--index-url 'https://example.invalid/whl/cpu'" in line)
    rest = next(i for i, line in enumerate(lines) if "-r ci/requirements-sglang-cpu.txt" in line)
    assert first < rest and "grep '^torch=='" in lines[first], recipe.stdout
    plain = make("-n", "-B", "-o", STAMP, ".venv/.sglang-cpu-stamp")
    assert "--index-url" not in plain.stdout and "2.7 GB" in plain.stdout, plain.stdout


# -- where `make test` puts its trees -------------------------------------------------------------


def _fake_proc(tmp_path: Path, folder: Path, kind: str, available_gib: int) -> dict[str, str]:
    mounts, meminfo = tmp_path / "mounts", tmp_path / "meminfo"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\n{kind} {folder} {kind} rw,relatime 0 0\n")
    meminfo.write_text(f"MemTotal: 25165824 kB\nMemAvailable: {available_gib << 20} kB\n")
    return {"ram_disk": str(folder), "mounts": str(mounts), "meminfo": str(meminfo)}


def test_the_trees_go_to_a_ram_disk_only_where_it_has_the_room(tmp_path, monkeypatch):
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(tmp_root, "ROOM_BYTES", 0)  # the test's own folder stands in for the tmpfs's room
    assert tmp_root.choose({}, **_fake_proc(tmp_path, folder, "tmpfs", 22)) == "ram"
    assert tmp_root.choose({"SGLPATCH_TEST_TMP": "disk"}, **_fake_proc(tmp_path, folder, "tmpfs", 22)) == "disk"
    assert tmp_root.choose({}, **_fake_proc(tmp_path, folder, "tmpfs", 8)) == "disk"  # no memory to spare
    assert tmp_root.choose({}, **_fake_proc(tmp_path, folder, "ext4", 22)) == "disk"
    assert tmp_root.choose({}, **_fake_proc(tmp_path, tmp_path / "missing", "tmpfs", 22)) == "disk"
    monkeypatch.setattr(tmp_root, "ROOM_BYTES", 1 << 60)
    assert tmp_root.choose({}, **_fake_proc(tmp_path, folder, "tmpfs", 22)) == "disk"  # the tmpfs is too small


def test_make_test_on_a_ram_disk_puts_its_trees_there():
    on_ram = make("-n", "-o", STAMP, "-o", ".venv/.sglang-cpu-stamp", "test", "TEST_TMP_KIND=ram")
    assert on_ram.returncode == 0, on_ram.stderr
    main_run = next(line for line in on_ram.stdout.splitlines() if "--ignore=tests/gpu" in line)
    assert "--basetemp='/dev/shm/sglpatch-pytest-" in main_run and "tmp_path_retention_policy=failed" in main_run
    on_disk = make("-n", "-o", STAMP, "-o", ".venv/.sglang-cpu-stamp", "test", "TEST_TMP_KIND=disk", "TMPDIR=/var/x")
    main_run = next(line for line in on_disk.stdout.splitlines() if "--ignore=tests/gpu" in line)
    assert "--basetemp='/var/x/sglpatch-pytest-" in main_run and "retention" not in on_disk.stdout


FAKE_PYTEST = """#!/bin/sh
# a pytest that makes a tree under its --basetemp, then fails (or, with SLOW set, waits to be interrupted)
for arg; do case "$arg" in --basetemp=*) trees="${arg#--basetemp=}";; esac; done
mkdir -p "$trees/test0" && echo tree > "$trees/test0/file"
[ -n "$SLOW" ] && exec sleep 60
exit 1
"""


@pytest.mark.parametrize("how", ["failed", "failed, KEEP_TREES=1", "interrupted"])
def test_a_failed_or_interrupted_make_test_leaves_no_trees_on_the_ram_disk_unless_asked(tmp_path, how):
    """Issue 48: a failed `make test` left 7.5 GB in /dev/shm. The recipe as make runs it, with a stand-in for
    pytest (it makes a tree, then fails or waits) and none for the line tests."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTEST)
    fake.chmod(0o755)
    trees = tmp_path / "shm" / "sglpatch-pytest"
    args = ["-o", STAMP, "-o", ".venv/.sglang-cpu-stamp", "test", "TEST_TMP_KIND=ram", f"PYTEST_TMP={trees}"]
    # (PYTEST, not PY: a PY that is no Python makes the Makefile take .venv for a broken one)
    args += [f"PYTEST={fake} --basetemp={trees}", "SGLPATCH=true"] + (["KEEP_TREES=1"] if "KEEP" in how else [])
    if MAKE is None:
        pytest.skip("make is not installed")
    env = os.environ | ({"SLOW": "1"} if how == "interrupted" else {})
    run = subprocess.Popen(
        [MAKE, "--no-print-directory", "-C", str(PROJECT_ROOT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=default_sigint,  # as at a terminal, even when this suite runs in a background job
    )
    if how == "interrupted":
        deadline = time.monotonic() + 30
        while not (trees / "test0" / "file").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the terminal signals make's whole process group
    _, err = run.communicate(timeout=60)
    assert run.returncode != 0, err
    assert trees.exists() == ("KEEP" in how), err
    said = "stay in" if "KEEP" in how else "are freed from the RAM disk"
    assert f"make: the trees of the failed run {said}" in err, err


# -- issue 36: CI runs on a machine as fresh as a user's ------------------------------------------------

# The identity is asked for outside any repository: what .ci/run controls is the global and system configuration
# (a developer's clone of this project may hold an identity of its own, which a clean clone does not).
CI_STUB = """#!/bin/sh
{{
echo "make $*"
env | grep -E '^(PIP_|GIT_|XDG_C|SGLPATCH_CACHE=|EMAIL=|HOME=)' | sort
ls -A "$HOME" | sed 's/^/home holds /'
(cd / && git config --get user.name) || echo "git: no user.name"
{python} -m pip config list | sed 's/^/pip config: /'
}} >> {seen}
"""


def test_ci_runs_the_readme_commands_as_on_a_fresh_machine(tmp_path):
    """.ci/run with a stand-in make that records what each call sees: an empty HOME of its own, no git
    configuration (no identity), none of pip's configuration (files or PIP_* variables, but the certificates),
    whatever the CI machine has set; then the README's commands in order, and the HOME removed after."""
    bin_dir, home, seen = tmp_path / "bin", tmp_path / "machine-home", tmp_path / "seen"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(CI_STUB.format(python=shlex.quote(sys.executable), seen=shlex.quote(str(seen))))
    (bin_dir / "make").chmod(0o755)
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = CI Machine\n\temail = ci@example.com\n")
    machine = {
        "HOME": str(home),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIP_FIND_LINKS": "/opt/wheels",
        "PIP_INDEX_URL": "file:///opt/mirror",
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
        "GIT_AUTHOR_NAME": "CI Machine",
        "GIT_COMMITTER_EMAIL": "ci@example.com",
        "EMAIL": "ci@example.com",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "SGLPATCH_CACHE": str(tmp_path / "cache"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PIP_"))} | machine
    result = subprocess.run(["bash", str(PROJECT_ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = seen.read_text().split("make ")[1:]
    system_python = ["test-python PYTHON=/usr/bin/python3"] if os.access("/usr/bin/python3", os.X_OK) else []
    assert [call.splitlines()[0] for call in calls] == ["apply", "test", *system_python, "check-patches", "test-fault"]
    for call in calls:
        lines = call.splitlines()[1:]
        settings = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("pip config"))
        ci_home = settings.pop("HOME")
        assert ci_home != str(home) and not Path(ci_home).exists(), ci_home  # its own, removed after the run
        assert settings == {
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
        }, settings
        assert "git: no user.name" in lines and not any(line.startswith("home holds") for line in lines), lines
        assert sorted(line for line in lines if line.startswith("pip config")) == [
            "pip config: :env:.cert='/etc/ssl/certs/ca-certificates.crt'",
            "pip config: :env:.config-file='/dev/null'",  # no file: not /etc/xdg/pip's, not the user's
        ]


def test_make_help_lists_every_target_in_any_locale(tmp_path):
    """Issue 48 S: under tr_TR.UTF-8, `[a-z]` leaves out `i`, and `make help` listed 17 of 26 targets."""
    made = subprocess.run(
        ["localedef", "-i", "tr_TR", "-f", "UTF-8", str(tmp_path / "tr_TR.UTF-8")], capture_output=True, text=True
    )
    if made.returncode not in (0, 1) or not (tmp_path / "tr_TR.UTF-8").exists():  # 1: made, with warnings
        pytest.skip(f"cannot make the tr_TR.UTF-8 locale here: {made.stderr.strip()[:200]}")
    in_c = make("help", env=os.environ | {"LC_ALL": "C"})
    in_turkish = make("help", env=os.environ | {"LC_ALL": "tr_TR.UTF-8", "LOCPATH": str(tmp_path)})
    targets = [line.split()[0] for line in in_c.stdout.splitlines()]
    assert "lint" in targets and "bench-engine" in targets and len(targets) > 20, in_c.stdout
    assert in_turkish.stdout == in_c.stdout, in_turkish.stdout


def test_make_test_leaves_a_pytest_tmp_of_the_users_alone(tmp_path):
    """`make test PYTEST_TMP=DIR` moved DIR aside and deleted it (pytest's --basetemp empties its folder too): a
    folder of the user's named there went. One holding files and no mark of a test run is refused before anything
    runs; tests/conftest.py marks the folders runs make."""
    mine = tmp_path / "my results"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    before = tree_state(mine)
    run = make("-o", ".venv/.sglang-cpu-stamp", "test", f"PYTEST_TMP={mine}")
    assert run.returncode == 2 and "holds files no test run made" in run.stderr, run.stdout + run.stderr
    assert tree_state(mine) == before
