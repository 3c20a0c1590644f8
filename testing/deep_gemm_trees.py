"""DeepGEMM trees for the tests: a real git repo made of the files PyPI gives, standing in for the GitHub checkout.

CI reaches PyPI only, never GitHub, so deepseek-ai/DeepGEMM itself cannot be cloned there. The repo here is
the **stand-in** the toolkit itself falls back to (rebase/git_releases.py): one commit holding the package
folder of the sgl-deep-gemm wheel the DeepGEMM line's pin names (sha256-checked), at the checkout's paths
(`deep_gemm/...`), without the cutlass submodule's headers and the built extension. It is not
deepseek-ai/DeepGEMM at 54e2261: it has no csrc/, setup.py or tests/, and its other headers are sgl-project's
build's; its three SM90 paged-MQA headers are byte-identical to 54e2261's (the line's pin records them).

The tests' own series are pinned to that commit (`stand_in_pin`), so every command runs on it as on a real
checkout; the project's own line (pinned at 54e2261) is checked on the real source by `make check-patches`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sglpatch.git import Git, init_repo
from sglpatch.lines import line_named
from sglpatch.pin import Pin
from sglpatch.rebase.git_releases import lay_out_stand_in
from testing.sglang_trees import make_series

LINE = "deep_gemm/54e2261"
SCHEDULER = "deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh"
KERNEL = "deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh"
NUMERIC = "deep_gemm/testing/numeric.py"
GROUPS = """{
  "upstream": "deepseek-ai/DeepGEMM",
  "groups": [
    {"id": "test-group", "title": "[Feature] A test change to the SM90 scheduler", "branch": "test-scheduler",
     "depends_on": [], "accuracy": [], "accuracy_notes": ["none: a test"], "speed_notes": ["none: a test"],
     "prior_art": [], "checklist": {}}
  ]
}
"""


@pytest.fixture(scope="session")
def line_pin() -> Pin:
    """The project's DeepGEMM line's pin (deepseek-ai/DeepGEMM 54e2261)."""
    return line_named(LINE).pin()


@pytest.fixture(scope="session")
def deep_gemm_source(tmp_path_factory, line_pin) -> Path:
    """The stand-in (see the module's docstring) as a git repo: what SGLPATCH_DEEP_GEMM_SOURCE points the tests at."""
    root = tmp_path_factory.mktemp("deep_gemm") / "source"
    lay_out_stand_in(init_repo(root), line_pin)
    return root


@pytest.fixture(scope="session")
def stand_in_pin(deep_gemm_source, line_pin) -> Pin:
    """A pin of the stand-in's commit, as a DeepGEMM line pins an upstream commit; its tag on that commit."""
    git = Git(deep_gemm_source)
    head = git.run("rev-parse", "HEAD")
    pin = Pin(head[:7], f"deep_gemm/{head[:7]}", "2026-06-23", line_pin.wheel, {}, line_pin.project, head)
    git.run("tag", pin.tag, head)
    return pin


def deep_gemm_series(source: Path, pin: Pin, out: Path, edits: list[tuple[str, str, str]]) -> Path:
    """A one-patch series of `edits` (path, old, new) against the stand-in, with a pr-groups.json."""
    message = "[Feature] A test change to the SM90 scheduler\n\nWhy: exercise the toolkit.\n\nPatch-Group: test-group\n"
    make_series(source, out.parent / f"{out.name}-dev", out, pin, [(message, edits)])
    (out / "pr-groups.json").write_text(GROUPS)
    return out


@pytest.fixture(scope="session")
def deep_gemm_patches(tmp_path_factory, deep_gemm_source, stand_in_pin) -> Path:
    """One patch: a comment in the SM90 paged-MQA scheduler header, and one in deep_gemm/testing/numeric.py."""
    edits = [
        (SCHEDULER, "namespace deep_gemm", "// test series: a note\nnamespace deep_gemm"),
        (NUMERIC, "def count_bytes(", "# test series: a note\ndef count_bytes("),
    ]
    return deep_gemm_series(deep_gemm_source, stand_in_pin, tmp_path_factory.mktemp("dg-series") / "patches", edits)
