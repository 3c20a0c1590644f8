"""The check of a DeepGEMM line (`make check-patches`): every prefix of the series compiles the SM90 paged-MQA
kernel for sm_90a (kernel_compile.py: nvcc from PyPI wheels, no GPU), for next_n 1 and 2 at 64 heads, and from a
patch on, the shapes the line's kernel-shapes.json lists for it (the instantiations its host code adds).

The trees are git worktrees of the line's default base: the base, then the base with patches 1..k, for each
k. On a stand-in base (git_releases.py: the sgl-deep-gemm wheel's package, where deepseek-ai/DeepGEMM could
not be fetched) only the patches' parts inside the package can be applied; the verdict line says how many
patches that leaves and that csrc/, setup.py and tests/ went unchecked.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.git import Git
from sglpatch.output import plural, say
from sglpatch.pin import Pin
from sglpatch.rebase.default_base import ensure_default_base
from sglpatch.rebase.git_releases import stand_in_of
from sglpatch.rebase.kernel_compile import compile_tree, shapes_of
from sglpatch.rebase.replay import prefix_worktrees
from sglpatch.series import Series

CHECK_REF = "refs/sglpatch/check/kernel"


def check_line(name: str, base: Path, series: Series, pin: Pin) -> int:
    """Compile each prefix's kernel; the number of prefixes (the base among them) whose kernel does not compile."""
    git = Git(ensure_default_base(pin, base))
    patches, names = series.patches, [patch.name for patch in series.patches]
    stand_in = stand_in_of(git, pin.tag)
    if stand_in:
        parts = [patch.package_part() for patch in series.patches]
        kept = [part for part in parts if part is not None]
        say(
            f"line {name}: on a stand-in, {stand_in}: {len(kept)} of {plural(len(patches), 'patch')} touch its "
            "files; their csrc/, setup.py and tests/ parts are not checked here (the note above says how the "
            "real source takes the stand-in's place)"
        )
        patches, names = kept, [part.name for part in kept]
    failures = 0
    with prefix_worktrees(git, pin.tag, patches, CHECK_REF, scratch="sglpatch-kernel-check-") as trees:
        for k, (label, tree) in enumerate(zip(["the base", *(f"with {n}" for n in names)], trees, strict=True)):
            builds = compile_tree(tree, pin, shapes_of(series.directory, [p.name for p in patches[:k]]))
            for build in builds:
                say(f"{label}: SM90 paged-MQA kernel, {build.describe()}  [{'ok' if build.ok else 'FAIL'}]")
            failures += not all(build.ok for build in builds)
    if not failures:
        say(f"line {name}: every prefix's SM90 paged-MQA kernel compiles for sm_90a ({len(trees)} trees)")
    return failures
