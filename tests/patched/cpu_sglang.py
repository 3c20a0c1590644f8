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
    ``sglpatch.rebase.cpu_standins.install_torchvision_standin`` (the product's, shared with
    the rebase import check; its docstring says why): no test may decode images.

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

from sglpatch.rebase.cpu_standins import install_torchvision_standin

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

    install_torchvision_standin()
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
