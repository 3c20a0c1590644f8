"""Upstream hygiene before a branch is pushed: sglang's formatters and linters.

black, isort (black profile, sglang as first party: sglang's .isort.cfg), ruff and codespell run on
every Python file the branch touches, at the branch and at its base. The branch is refused when it
adds findings; what upstream already had in those files is not ours to fix.

ruff runs with the rules sglang's pre-commit selects (F401, unused imports) plus
F821 (undefined names, always a bug), not ruff's defaults: those flag sglang's own
style (`Optional[...]`, import order that isort owns) in every file it touches.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.git import Git

TOOLS = ("black", "isort", "ruff", "codespell")
RUFF_RULES = "F401,F821"


def check_hygiene(git: Git, base: str, tip: str, label: str) -> None:
    paths = git.paths("diff", "--name-only", "--diff-filter=AMR", base, tip, "--", "*.py")
    if not paths:
        return
    with tempfile.TemporaryDirectory(prefix="sglpatch-lint-") as tmp:
        settings = Path(tmp) / "settings"
        settings.mkdir()
        (settings / "empty.toml").write_text("")
        before = _findings(git, base, paths, Path(tmp) / "base", settings)
        after = _findings(git, tip, paths, Path(tmp) / "tip", settings)
    added = after - before
    if added:
        shown = "; ".join(f"{tool} {what} in {path}" for tool, path, what in sorted(added)[:4])
        more = f" (+{sum(added.values()) - min(4, len(added))} more)" if sum(added.values()) > 4 else ""
        raise FatalError(f"{label}: the branch adds lint findings: {shown}{more}; fix them before pushing")


def _findings(git: Git, rev: str, paths: list[str], root: Path, settings: Path) -> Counter:
    """Each tool's findings in `paths` at `rev`, laid out under `root`: the tools run from `settings`, a folder of
    their own with an empty settings file, so no setting of the user's (black's ~/.config/black, a setup.cfg or
    .codespellrc where `pr` runs, an .isort.cfg) hides a finding sglang's CI would make."""
    files = []
    for path in paths:
        status, _, _ = git.try_run("cat-file", "-e", f"{rev}:{path}")
        if status != 0:
            continue
        local = root / path
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(git.run_bytes("show", f"{rev}:{path}"))
        files.append(local)
    found: Counter = Counter()
    for local in files:
        rel = str(local.relative_to(root))
        for tool in TOOLS:
            for what in _run_tool(tool, local, settings):
                found[(tool, rel, what)] += 1
    return found


def _run_tool(tool: str, path: Path, settings: Path) -> list[str]:
    empty = str(settings / "empty.toml")
    commands = {
        "black": ["-m", "black", "--config", empty, "--check", "--quiet", str(path)],
        "isort": [
            *("-m", "isort", "--settings-path", str(settings), "--check-only", "--profile", "black"),
            *("-p", "sglang", "--quiet", str(path)),
        ],
        "ruff": [
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--no-cache",
            "--select",
            RUFF_RULES,
            "--output-format",
            "concise",
            str(path),
        ],
        "codespell": ["-m", "codespell_lib", "--config", empty, str(path)],
    }
    result = subprocess.run(
        [sys.executable, *commands[tool]], capture_output=True, text=True, check=False, cwd=settings
    )
    if "No module named" in result.stderr:
        raise FatalError(f"{tool} is not installed; `pip install black isort ruff codespell` (make test installs them)")
    if result.returncode == 0:
        return []
    if tool in ("black", "isort"):
        return ["would reformat"]
    if tool == "ruff":
        return [
            line.split(": ", 1)[1].split()[0]
            for line in result.stdout.splitlines()
            if ": " in line and line.startswith(str(path))
        ]
    return [line.split(": ", 1)[1].split(" ==>")[0] for line in result.stdout.splitlines() if ": " in line]
