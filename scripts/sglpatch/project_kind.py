"""What a target is: a project with a pin. sglang is the first kind, and the default.

A kind says where its package sits in a checkout (the paths its patches name), how a
package folder of it is told apart, where it writes its version, and its name on PyPI
(the wheel a pin records and a default base is made from). A second kind (the kernel
library) is one more `ProjectKind` value, passed where a target, a pin or a release is
opened; everything else asks the kind, not the name "sglang".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProjectKind:
    name: str  # what messages and pin.json call it, and its default base's folder (build/<name>)
    package: str  # the import package: its folder's name in a wheel and in site-packages
    package_prefix: str  # where that folder sits in a checkout, as patches name it ("python/sglang/")
    test_prefix: str  # the project's own test tree in a checkout (a checkout's only: a wheel has none)
    marker: str  # a sub-folder only this package has: what tells a package folder of it from any other
    wheel: str  # the distribution on PyPI
    version_files: tuple[str, ...] = ("version.py", "_version.py")  # in the package: a literal __version__

    @property
    def checkout_folder(self) -> str:
        return self.package_prefix.rstrip("/")

    @property
    def wheel_stem(self) -> str:
        """The distribution's name as wheel and dist-info file names spell it (runs of -_. as one _)."""
        return re.sub(r"[-_.]+", "_", self.wheel)

    def is_package(self, folder: Path) -> bool:
        return (folder / "__init__.py").is_file() and (folder / self.marker).is_dir()


SGLANG = ProjectKind(
    name="sglang",
    package="sglang",
    package_prefix="python/sglang/",
    test_prefix="test/",
    marker="srt",
    wheel="sglang",
)
DEFAULT_KIND = SGLANG
