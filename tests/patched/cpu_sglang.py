"""CPU harness for importing a (patched) sglang source tree in tests.

The tests under ``tests/patched`` exercise the series' changes to sglang
modules on a machine without a GPU.  They never use an installed ``sglang``:
they import the tree that ``make apply`` writes (or any other tree named by
the environment), so the same tests can be pointed at a pristine tree to show
that they fail there.

Public API (kept small on purpose; other test modules depend on it):

``SGLANG_TREE_ENV``
    Name of the environment variable that selects the tree:
    ``SGLPATCH_SGLANG_TREE``.  Its value is a folder that contains the
    ``sglang/`` package (the ``python/`` folder of an sglang checkout).

``sglang_tree() -> pathlib.Path``
    The selected folder.  Defaults to ``<repo>/build/sglang/python``, where
    ``make apply`` puts the patched default base.  Raises ``RuntimeError``
    (which the conftest turns into a failing test, never a skip) when the
    folder or its ``sglang/__init__.py`` is missing.

``install() -> pathlib.Path``
    Idempotent.  Installs the stand-ins listed below, puts the selected tree
    first on ``sys.path`` and checks that ``import sglang`` resolves inside it.
    Must run before any ``sglang`` import; ``conftest.py`` calls it at
    collection time.  Returns the tree.

``import_sglang(name: str) -> module``
    ``install()`` then ``importlib.import_module(name)``.

``init_single_rank_parallel() -> None``
    Idempotent.  Brings up a one-process gloo group and sglang's model
    parallel state (world size 1), which some metadata code paths need.

``seqlens_expand_cpu(extend_seq_lens, seq_lens, total_len, max_q_len)``
    Plain-torch equivalent of sglang's ``seqlens_expand_triton`` (which
    asserts CUDA tensors): for each request, the ``qo_len`` values
    ``kv_len - qo_len + 1 .. kv_len`` concatenated.  Patch it over the name a
    module imported (``monkeypatch.setattr(mod, "seqlens_expand_triton",
    seqlens_expand_cpu)``).

``RecordingKernel``
    A callable that records its positional/keyword arguments and returns a
    tensor computed by a user function.  Meant to stand in for a single GPU
    kernel entry point (for example ``deep_gemm.fp8_paged_mqa_logits``) and
    nothing else.

Stand-ins, and what each one stands for (only GPU-only or CPU-broken
packages get one):

``torchvision``
    Stands for the real torchvision package.  PyPI torchvision does not load
    next to the CPU torch build used in CI ("operator torchvision::nms does
    not exist"), and an unpinned install swaps torch for a CUDA build.
    sglang imports ``torchvision.io.decode_jpeg`` at module level and
    transformers probes whether torchvision is installed, so the stand-in is
    a real module object with a spec, a version, and the ``io`` /
    ``transforms`` submodules; every function on it raises if called,
    because no test may decode images.

Nothing else is faked: ``sgl_kernel``, ``flashinfer`` and ``deep_gemm`` are
imported by sglang only behind ``is_cuda()`` or ``try/except``, so on a CPU
machine they are simply absent.  Tests that need to see a kernel call set a
``RecordingKernel`` on the one attribute they exercise.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

SGLANG_TREE_ENV = "SGLPATCH_SGLANG_TREE"

_REPO_ROOT = Path(__file__).resolve().parents[2]
_DEFAULT_TREE = _REPO_ROOT / "build" / "sglang" / "python"

_installed_tree: Path | None = None
_parallel_ready = False


def sglang_tree() -> Path:
    """Return the folder holding ``sglang/``; raise if it is not there."""
    raw = os.environ.get(SGLANG_TREE_ENV)
    tree = Path(raw).expanduser().resolve() if raw else _DEFAULT_TREE
    if not (tree / "sglang" / "__init__.py").is_file():
        where = f"{SGLANG_TREE_ENV}={raw}" if raw else f"default {tree}"
        raise RuntimeError(
            f"no sglang source tree at {tree} ({where}): "
            "run `make apply` first, or point "
            f"{SGLANG_TREE_ENV} at a folder that contains sglang/"
        )
    return tree


def _unusable(name: str) -> Callable[..., Any]:
    def _raise(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{name} belongs to the torchvision stand-in of the CPU test " "harness and cannot be used in tests"
        )

    _raise.__name__ = name.rsplit(".", 1)[-1]
    return _raise


def _new_module(name: str, is_package: bool) -> types.ModuleType:
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, loader=None, is_package=is_package, origin="cpu-test stand-in")
    if is_package:
        spec.submodule_search_locations = []
        module.__path__ = []
    module.__spec__ = spec
    module.__file__ = None
    return module


def _install_torchvision_standin() -> None:
    """Register an import-level torchvision stand-in (see module docstring)."""
    existing = sys.modules.get("torchvision")
    if existing is not None and getattr(existing, "_sglpatch_standin", False):
        return
    root = _new_module("torchvision", is_package=True)
    root.__version__ = "0.0.0+cpu-test-standin"
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


def install() -> Path:
    """Put the selected tree first on sys.path and install the stand-ins."""
    global _installed_tree
    tree = sglang_tree()
    if _installed_tree is not None:
        if _installed_tree != tree:
            raise RuntimeError(
                f"sglang was already set up from {_installed_tree}; " f"cannot switch to {tree} in the same process"
            )
        return tree

    loaded = sys.modules.get("sglang")
    if loaded is not None:
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if tree not in origin.parents:
            raise RuntimeError(
                f"sglang was imported from {origin} before the harness ran; " f"expected it under {tree}"
            )

    _install_torchvision_standin()
    tree_str = str(tree)
    if tree_str in sys.path:
        sys.path.remove(tree_str)
    sys.path.insert(0, tree_str)

    import sglang  # resolved from the tree just inserted

    origin = Path(sglang.__file__).resolve()
    if tree not in origin.parents:
        raise RuntimeError(f"`import sglang` resolved to {origin}, not under {tree}")
    _installed_tree = tree
    return tree


def import_sglang(name: str) -> types.ModuleType:
    """Import ``name`` (for example ``sglang.srt.layers.attention.dsa_backend``)."""
    install()
    return importlib.import_module(name)


def init_single_rank_parallel() -> None:
    """One-rank gloo process group plus sglang's model-parallel state."""
    global _parallel_ready
    if _parallel_ready:
        return
    install()
    parallel_state = importlib.import_module("sglang.srt.distributed.parallel_state")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            backend="gloo",
            distributed_init_method="tcp://127.0.0.1:0",
        )
        parallel_state.initialize_model_parallel(1, backend="gloo")
    _parallel_ready = True


def seqlens_expand_cpu(extend_seq_lens, seq_lens, total_len: int, max_q_len: int):
    """Plain-torch ``seqlens_expand_triton``: see the module docstring."""
    import torch

    del max_q_len  # only sizes the triton block
    pieces = [
        torch.arange(int(kv) - int(qo) + 1, int(kv) + 1, dtype=torch.int32)
        for qo, kv in zip(extend_seq_lens.tolist(), seq_lens.tolist(), strict=True)
    ]
    out = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.int32)
    assert out.numel() == total_len, (out.numel(), total_len)
    return out.to(seq_lens.device)


class RecordingKernel:
    """Callable stand-in for one GPU kernel entry point.

    ``RecordingKernel(result_fn)`` records each call as ``(args, kwargs)`` in
    ``.calls`` and returns ``result_fn(*args, **kwargs)``.
    """

    def __init__(self, result_fn: Callable[..., Any]):
        self.result_fn = result_fn
        self.calls: list[tuple] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.result_fn(*args, **kwargs)
