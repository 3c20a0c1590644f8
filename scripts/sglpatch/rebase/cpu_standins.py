"""Import-level stand-ins for what sglang imports but a CPU machine cannot load.

Only torchvision: PyPI torchvision does not load next to the CPU torch build ("operator
torchvision::nms does not exist"), and an unpinned install swaps torch for a CUDA build. sglang
imports ``torchvision.io.decode_jpeg`` at module level and transformers probes whether torchvision
is installed, so the stand-in is a real module object with a spec, a version and the ``io`` /
``transforms`` submodules; every function on it raises if called. Used by the rebase import check
(``prefix_checks``) and by the CPU test harness (tests/patched/cpu_sglang.py).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any


def _unusable(name: str) -> Callable[..., Any]:
    def _raise(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} belongs to sglpatch's torchvision stand-in (CPU imports only) and cannot be called")

    _raise.__name__ = name.rsplit(".", 1)[-1]
    return _raise


def _new_module(name: str, is_package: bool) -> types.ModuleType:
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, loader=None, is_package=is_package, origin="sglpatch CPU stand-in")
    if is_package:
        spec.submodule_search_locations = []
        module.__path__ = []
    module.__spec__ = spec
    module.__file__ = None
    return module


def install_torchvision_standin() -> None:
    """Register the torchvision stand-in in sys.modules (idempotent)."""
    existing = sys.modules.get("torchvision")
    if existing is not None and getattr(existing, "_sglpatch_standin", False):
        return
    root = _new_module("torchvision", is_package=True)
    root.__version__ = "0.0.0+sglpatch-cpu-standin"
    root._sglpatch_standin = True

    io_mod = _new_module("torchvision.io", is_package=False)
    for fn in ("decode_jpeg", "decode_image", "read_image", "read_video"):
        setattr(io_mod, fn, _unusable(f"torchvision.io.{fn}"))

    class ImageReadMode:
        """Names of the image read modes transformers refers to."""

        UNCHANGED = 0
        GRAY = 1
        GRAY_ALPHA = 2
        RGB = 3
        RGB_ALPHA = 4

    io_mod.ImageReadMode = ImageReadMode

    transforms = _new_module("torchvision.transforms", is_package=True)

    class InterpolationMode:
        """Names of the interpolation modes some processors refer to."""

        NEAREST = "nearest"
        NEAREST_EXACT = "nearest-exact"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        BOX = "box"
        HAMMING = "hamming"
        LANCZOS = "lanczos"

    transforms.InterpolationMode = InterpolationMode
    functional = _new_module("torchvision.transforms.functional", is_package=False)
    functional.InterpolationMode = InterpolationMode
    for fn in ("resize", "normalize", "to_tensor", "pil_to_tensor"):
        setattr(functional, fn, _unusable(f"torchvision.transforms.functional.{fn}"))
    transforms.functional = functional
    v2 = _new_module("torchvision.transforms.v2", is_package=True)
    v2_functional = _new_module("torchvision.transforms.v2.functional", False)
    v2_functional.InterpolationMode = InterpolationMode
    for fn in ("resize", "normalize", "pil_to_tensor", "to_dtype", "center_crop"):
        setattr(v2_functional, fn, _unusable(f"torchvision.transforms.v2.{fn}"))
    v2.functional = v2_functional
    transforms.v2 = v2

    root.io = io_mod
    root.transforms = transforms
    sys.modules["torchvision"] = root
    sys.modules["torchvision.io"] = io_mod
    sys.modules["torchvision.transforms"] = transforms
    sys.modules["torchvision.transforms.functional"] = functional
    sys.modules["torchvision.transforms.v2"] = v2
    sys.modules["torchvision.transforms.v2.functional"] = v2_functional
