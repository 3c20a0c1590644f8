"""What a GPU run ran on: the one environment probe of the GPU leg and of sglang's DSA kit driver.

Run it under the Python that runs the tests (`python -m sglpatch.gpu.gpu_environment` prints the
facts as one JSON line): the leg's summary and the kit's summary both report these facts.
Standard library only at import; torch and deep_gemm are imported inside, and a failure to
import them is a fact too, never an error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import shutil
import subprocess
from pathlib import Path


def distribution_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def fa3_in_kernel_package() -> bool:
    spec = importlib.util.find_spec("sgl_kernel")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(any(Path(loc).glob("flash_ops*.so")) for loc in spec.submodule_search_locations)


def environment_facts() -> dict:
    """Every key present, None where unknown (docs/ci/gpu-leg-summary.md, `environment`)."""
    facts = {
        "python": platform.python_version(),
        "host": platform.node(),
        "gpu": None,
        "compute_capability": None,
        "gpu_count": 0,
        "sm_count": None,
        "torch": None,
        "cuda": None,
        "driver": _driver_version(),
        "deep_gemm": distribution_version("sgl-deep-gemm", "deep-gemm", "deep_gemm"),
        "sglang": distribution_version("sglang"),
        "sglang_kernel": distribution_version("sglang-kernel", "sgl-kernel"),
        "flashinfer": distribution_version("flashinfer-python"),
        "transformers": distribution_version("transformers"),
        "fa3_in_bundle": fa3_in_kernel_package(),
        "xdist": importlib.util.find_spec("xdist") is not None,
    }
    spec = importlib.util.find_spec("sglang")
    facts["sglang_imported_from"] = spec.origin if spec else None
    facts.update(_torch_facts())
    if facts["deep_gemm"] is None and importlib.util.find_spec("deep_gemm") is not None:
        facts.update(_deep_gemm_module_version())
    return facts


def _torch_facts() -> dict:
    try:
        import torch

        facts = {"torch": torch.__version__, "cuda": torch.version.cuda}
        if torch.cuda.is_available():
            facts["gpu_count"] = torch.cuda.device_count()
            facts["gpu"] = torch.cuda.get_device_name(0)
            major, minor = torch.cuda.get_device_capability(0)
            facts["compute_capability"] = f"{major}.{minor}"
            facts["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        return facts
    except Exception as exc:  # reported, not fatal
        return {"torch_error": repr(exc)}


def _deep_gemm_module_version() -> dict:
    try:
        import deep_gemm

        return {"deep_gemm": getattr(deep_gemm, "__version__", "unknown")}
    except Exception as exc:  # reported, not fatal
        return {"deep_gemm_error": repr(exc)}


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    )
    return (result.stdout.splitlines() or [None])[0]


if __name__ == "__main__":
    print(json.dumps(environment_facts()))
