"""A target is a project with a pin (project_kind.py): sglang is the default kind, and a second kind is one value.

The second kind here is a stand-in for the kernel library (its wheel is made in the test: there is no such
series yet); it goes through the same code the sglang trees do: a release commit from its wheel, a checkout
of it, a package folder of it, its pin.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from sglpatch.errors import FatalError
from sglpatch.git import Git, init_repo
from sglpatch.lines import default_line
from sglpatch.pin import parse_pin
from sglpatch.project_kind import DEFAULT_KIND, SGLANG, ProjectKind
from sglpatch.rebase.releases import check_out_release
from sglpatch.targets.target import GIT_CHECKOUT, PACKAGE_FOLDER, open_target

# DeepGEMM's package sits at the top of its checkout; its import package is named like it (the default)
KERNELS = ProjectKind(
    name="deep_gemm", package_prefix="deep_gemm/", test_prefix="tests/", marker="jit_kernels", wheel="deep-gemm"
)
RELEASE = "2.1.0"
WHEEL = f"deep_gemm-{RELEASE}-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_sglang_is_the_default_kind(checkout, package, project_pin):
    assert DEFAULT_KIND is SGLANG
    assert project_pin.project is SGLANG and default_line().project is SGLANG
    for path in (checkout, package):
        target = open_target(path)
        assert target.project is SGLANG
        assert target.version() == project_pin.release
    assert open_target(checkout).paths_or_package([]) == ["python/sglang"]


@pytest.fixture
def kernels_wheel(tmp_path) -> Path:
    wheel = tmp_path / "wheels" / WHEEL
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("deep_gemm/__init__.py", "from deep_gemm._version import __version__\n")
        archive.writestr("deep_gemm/_version.py", f'__version__ = "{RELEASE}"\n')
        archive.writestr("deep_gemm/jit_kernels/__init__.py", "")
        archive.writestr(f"deep_gemm-{RELEASE}.dist-info/METADATA", f"Name: deep-gemm\nVersion: {RELEASE}\n")
    return wheel


def test_a_second_kind_checkout_from_its_wheel(tmp_path, kernels_wheel):
    root = tmp_path / "DeepGEMM"
    check_out_release(init_repo(root), RELEASE, kernels_wheel, date="2025-01-02", project=KERNELS)
    git = Git(root)
    assert git.run("ls-files").splitlines() == [
        "deep_gemm/__init__.py",
        "deep_gemm/_version.py",
        "deep_gemm/jit_kernels/__init__.py",
    ]
    assert git.run("log", "-1", "--format=%an%n%s") == f"deep_gemm release (PyPI wheel)\ndeep_gemm v{RELEASE} from PyPI"

    target = open_target(root, KERNELS)
    assert (target.kind, target.root, target.project) == (GIT_CHECKOUT, root.resolve(), KERNELS)
    assert target.version() == RELEASE
    assert (
        target.local_path("deep_gemm/jit_kernels/__init__.py") == root.resolve() / "deep_gemm/jit_kernels/__init__.py"
    )
    assert target.paths_or_package([]) == ["deep_gemm"]


def test_a_second_kind_package_folder(tmp_path, kernels_wheel, capsys):
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(kernels_wheel) as archive:
        archive.extractall(site)
    (site / "deep_gemm" / "_version.py").unlink()  # the version is then the dist-info's

    target = open_target(site, KERNELS)
    assert (target.kind, target.root) == (PACKAGE_FOLDER, (site / "deep_gemm").resolve())
    assert f"using the package folder {site.resolve() / 'deep_gemm'}" in capsys.readouterr().out
    assert target.version() == RELEASE
    assert target.local_path("deep_gemm/jit_kernels/__init__.py") == target.root / "jit_kernels/__init__.py"
    with pytest.raises(FatalError, match="has no place in the package folder"):
        target.local_path("tests/test_gemm.py")


def test_a_kind_opens_only_its_own_trees(checkout, tmp_path):
    with pytest.raises(FatalError) as refused:
        open_target(checkout, KERNELS)
    assert str(refused.value) == (
        f"{checkout} is not deep_gemm: expected a checkout with deep_gemm/ or a package folder with __init__.py "
        "and jit_kernels/"
    )


def test_a_second_kind_pin(project_pin):
    data = json.loads(project_pin.to_json())
    data["deep_gemm"] = data.pop("sglang")
    data["wheel"]["filename"] = WHEEL
    data["blobs"] = {"deep_gemm/__init__.py": "", "tests/test_gemm.py": ""}
    pin = parse_pin(json.dumps(data), project=KERNELS)
    assert pin.project is KERNELS and pin.release == project_pin.release
    assert json.loads(pin.to_json()) == data
    with pytest.raises(FatalError, match="missing or mistyped field 'sglang'"):
        parse_pin(json.dumps(data))
