"""What a target is: a project with a pin. sglang is the first kind, and the default.

A kind says where its package sits in a checkout (the paths its patches name), how a
package folder of it is told apart, where it writes its version, and its name on PyPI
(the wheel a pin records and a default base is made from). A second kind (the kernel
library) is one more `ProjectKind` value, passed where a target, a pin or a release is
opened; everything else asks the kind, not the name "sglang".

Releases come in two shapes (`from_git`): sglang's are PyPI wheels, made into git commits here
(rebase/releases.py); DeepGEMM's (DEEP_GEMM) are commits of its own repository, taken from a clone
(rebase/git_releases.py). A kind of the second shape has its lines in patches/<name>/<commit>/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProjectKind:
    name: str  # what messages and pin.json call it, and its default base's folder (build/<name>)
    package_prefix: str  # where the package's folder sits in a checkout, as patches name it ("python/sglang/")
    test_prefix: str  # the project's own test tree in a checkout (a checkout's only: a wheel has none)
    marker: str  # a sub-folder only this package has: what tells a package folder of it from any other
    package: str = ""  # the import package: its folder's name in a wheel and in site-packages (default: name)
    wheel: str = ""  # the distribution on PyPI (default: name)
    version_files: tuple[str, ...] = ("version.py", "_version.py")  # in the package: a literal __version__
    checkout_paths: tuple[str, ...] = ()  # what else a patch may touch in a checkout (host sources, setup.py)
    upstream: str = "sgl-project/sglang"  # the GitHub repository PRs go to
    from_git: bool = False  # releases are upstream commits (a clone), not PyPI wheels

    def __post_init__(self):
        for named_like_the_project in ("package", "wheel"):
            if not getattr(self, named_like_the_project):
                object.__setattr__(self, named_like_the_project, self.name)

    @property
    def upstream_url(self) -> str:
        return f"https://github.com/{self.upstream}"

    @property
    def patch_prefixes(self) -> tuple[str, ...]:
        """Where a patch of this kind may write: the package, the test tree, and the checkout's other paths."""
        return (self.package_prefix, self.test_prefix, *self.checkout_paths)

    @property
    def checkout_folder(self) -> str:
        return self.package_prefix.rstrip("/")

    @property
    def wheel_stem(self) -> str:
        """The distribution's name as wheel and dist-info file names spell it (runs of -_. as one _)."""
        return re.sub(r"[-_.]+", "_", self.wheel)

    def is_package(self, folder: Path) -> bool:
        return (folder / "__init__.py").is_file() and (folder / self.marker).is_dir()


SGLANG = ProjectKind(name="sglang", package_prefix="python/sglang/", test_prefix="test/", marker="srt")
DEFAULT_KIND = SGLANG
# deepseek-ai/DeepGEMM: `deep_gemm/` at the top of a checkout (include/ holds the JIT kernels' headers, what a
# package folder has too), the host code in csrc/ and the build in setup.py and CMakeLists.txt (a checkout's only).
# Its distribution on PyPI is sgl-project's build of it (what a package folder's dist-info names).
DEEP_GEMM = ProjectKind(
    name="deep_gemm",
    package_prefix="deep_gemm/",
    test_prefix="tests/",
    marker="include",
    wheel="sgl-deep-gemm",
    version_files=("__init__.py",),
    checkout_paths=("csrc/", "setup.py", "CMakeLists.txt", "scripts/", "third-party/tilelang_ops/"),
    upstream="deepseek-ai/DeepGEMM",
    from_git=True,
)
KINDS = (SGLANG, DEEP_GEMM)


def kind_named(name: str) -> ProjectKind:
    return next(kind for kind in KINDS if kind.name == name)
