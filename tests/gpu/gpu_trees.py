"""Where the GPU tests find what they run: a CUDA device with DeepGEMM, and sglang trees.

- ``gpu_skip_reason()``: why the GPU tests cannot run here (no torch, no CUDA device, a GPU
  that is neither SM90 nor SM100, ``deep_gemm`` or ``sgl_kernel`` not importable), or None;
  ``skip_module_without_gpu()`` skips the calling test module with that reason.
- ``sm90_kernels_or_skip(no_gpu, not_sm90, *needed)``: torch and deep_gemm for a kernel-level test
  module on an SM90 GPU; else the module is skipped, saying why.
- ``require_patched_tree()``: the patched tree for a test; skips it where there is none, fails it
  where the tree does not carry the series.
- ``patched_tree()``: ``$SGLPATCH_SGLANG_TREE`` or ``<repo>/build/sglang/python`` (what
  ``make apply`` writes); None when neither holds ``sglang/``.
- ``pristine_tree(tmp)``: ``$SGLPATCH_PRISTINE_TREE``, else the sglang 0.5.14 wheel in the
  sglpatch cache (``$SGLPATCH_CACHE`` or ``~/.cache/sglpatch``) unpacked into ``tmp``.
- ``expected_sm90_layout(next_n, batch_size, width)``: the v0.5.14 line's SM90 row-width rule, and
  ``expected_sm90_rows_v0_5_23(next_n, batch_size, takes_next_n_rows)`` the v0.5.23 line's, written out
  here independently of the patched trees, for the GPU runs to check the trees against.

ci/run_indexer_gpu.sh sets both variables from the bundle: the pristine package folder, and
the same folder with ``patches/v0.5.14/series`` applied.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def gpu_skip_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device: the DSA indexer's DeepGEMM and sgl-kernel paths need a GPU"
    major, _ = torch.cuda.get_device_capability()
    if major not in (9, 10):
        return f"GPU is SM{major}x: DeepGEMM's paged MQA logits need SM90 or SM100"
    for name in ("deep_gemm", "sgl_kernel"):
        # import in a child so a broken extension cannot take the test process down
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True)
        if probe.returncode != 0:
            tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
            return f"`import {name}` fails here ({tail}); see docs/gpu-bundle.md"
    return None


def skip_module_without_gpu() -> None:
    """Called as a test module is imported: skips the whole module, with the reason, where the GPU tests
    cannot run."""
    __tracebackhide__ = True  # pytest reports the skip at the test module's line
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason, allow_module_level=True)


def sm90_kernels_or_skip(no_gpu: str, not_sm90: str, *needed: str):
    """Called as a kernel-level test module is imported: (torch, deep_gemm) on an SM90 GPU with the modules
    ``needed`` importable; else skips the whole module with ``no_gpu`` (no CUDA device), ``not_sm90``
    (``{sm}`` becomes the device's, e.g. sm_100), or what failed to import."""
    __tracebackhide__ = True  # pytest reports the skip at the test module's line
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip(no_gpu, allow_module_level=True)
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip(not_sm90.format(sm=f"sm_{major}{minor}"), allow_module_level=True)
    for name in needed:
        pytest.importorskip(name, reason=f"{name} is not installed")
    try:
        import deep_gemm
    except Exception as exc:  # noqa: BLE001  ImportError, or a failed module build
        pytest.skip(f"deep_gemm is not importable: {exc}", allow_module_level=True)
    return torch, deep_gemm


def require_patched_tree() -> Path:
    __tracebackhide__ = True
    tree = patched_tree()
    if tree is None:
        pytest.skip("no patched sglang tree: run `make apply` or set SGLPATCH_SGLANG_TREE")
    if not is_patched(tree):
        pytest.fail(f"{tree} does not carry the series (no paged_mqa_layout / seed_dsa_topk_from_draft_extend)")
    return tree


def _has_sglang(tree: Path) -> bool:
    return (tree / "sglang" / "__init__.py").is_file()


def patched_tree() -> Path | None:
    raw = os.environ.get("SGLPATCH_SGLANG_TREE")
    tree = Path(raw) if raw else REPO / "build" / "sglang" / "python"
    return tree.resolve() if _has_sglang(tree) else None


def is_patched(tree: Path) -> bool:
    """The series' marks: patch 1's layout field, patch 3's seed switch."""
    backend = (tree / "sglang/srt/layers/attention/dsa_backend.py").read_text()
    worker = (tree / "sglang/srt/speculative/eagle_worker_v2.py").read_text()
    return "paged_mqa_layout" in backend and "seed_dsa_topk_from_draft_extend" in worker


def pristine_tree(tmp: Path) -> Path | None:
    raw = os.environ.get("SGLPATCH_PRISTINE_TREE")
    if raw:
        return Path(raw).resolve() if _has_sglang(Path(raw)) else None
    cache = Path(os.environ.get("SGLPATCH_CACHE", Path.home() / ".cache" / "sglpatch")) / "wheels"
    wheels = sorted(cache.glob("sglang-0.5.14-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("sglang/") and not n.endswith(".so")])
    return tmp.resolve()


def expected_sm90_layout(next_n: int, batch_size: int, width: int, num_sms: int = 132) -> str:
    """The layout the series' SM90 rule gives a TARGET_VERIFY batch of ``batch_size`` requests whose
    block table is ``width`` tokens wide: for even next_n two tokens per row (native for next_n 2,
    paired above) from 16 two-token rows, where that needs fewer waves of (row, 256-key chunk)
    units over the SMs than one token per row; else, and for odd next_n, per_token."""
    if next_n < 2 or next_n % 2:
        return "per_token"
    rows = batch_size * next_n // 2
    if rows < 16:
        return "per_token"
    chunks = -(-width // 256)
    if -(-rows * chunks // num_sms) >= -(-batch_size * next_n * chunks // num_sms):
        return "per_token"
    return "native" if next_n == 2 else "paired"


V0_5_23_MIN_TWO_TOKEN_ROWS = 16


def expected_sm90_rows_v0_5_23(next_n: int, batch_size: int, takes_next_n_rows: bool) -> tuple[str, int]:
    """(layout, query tokens per DeepGEMM row) the v0.5.23 line's SM90 rule gives a TARGET_VERIFY batch of
    ``batch_size`` requests. Even next_n: two tokens per row (native for next_n 2, paired above) once that
    makes 16 rows, whatever the block table's width (patch 1); odd next_n: all of a request's tokens in
    one row where the installed DeepGEMM said it takes them (``takes_next_n_rows``, patch 2's probe),
    else one token per row."""
    if next_n < 2:
        return "per_token", 1
    if next_n % 2:
        return ("native", next_n) if takes_next_n_rows else ("per_token", 1)
    if batch_size * next_n // 2 < V0_5_23_MIN_TWO_TOKEN_ROWS:
        return "per_token", 1
    return ("native" if next_n == 2 else "paired"), 2
