"""ci/build_deep_gemm.sh's mechanics on a CPU: the key, the staging folder and the one-rename switch, reuse on a
warm box, restore from a carried build, an interrupted build leaving the previous one in place, the record of
the headers' sha256, and ci/gpu_box.sh's --deep-gemm source writing that record into a run's results.

No GPU, no torch build: a stand-in `python` (setup.py writes a stub extension; `import deep_gemm` succeeds
or, to cut a build short, fails) and a stand-in nvcc that only says its version. The real build runs on the
GPU box (docs/gpu-bundle.md, "DeepGEMM from source").
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADERS = (
    "deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/mma/sm90.cuh",
)
FAKE_PYTHON = f"""#!/usr/bin/env bash
if [ "${{1:-}}" = setup.py ]; then
  [ -n "${{FAIL_BUILD:-}}" ] && {{ echo "error: the compiler was killed" >&2; exit 1; }}
  echo "CC=$CC CXX=$CXX cutlass=$DG_CUTLASS_INCLUDE_DIR fmt=$DG_FMT_INCLUDE_DIR" > built-with.txt
  touch deep_gemm/_C.stub.so; exit 0
fi
if [ "${{1:-}}" = -c ] && [ "${{2:-}}" = "import deep_gemm" ]; then exit 0; fi
if [ "${{1:-}}" = -c ] && [ "${{2:-}}" = "import torch; print(torch.__version__)" ]; then echo 2.11.0+cu130; exit 0; fi
exec {sys.executable} "$@"
"""


def _tar_xz(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:xz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def _bundle(root: Path, wheel_headers: bytes = b"// the pinned header\n") -> Path:
    part = root / "deep_gemm"
    part.mkdir(parents=True)
    source = {f"DeepGEMM/{h}": b"// the pinned header\n" for h in HEADERS}
    source |= {"DeepGEMM/setup.py": b"# stand-in\n", "DeepGEMM/deep_gemm/__init__.py": b""}
    _tar_xz(part / "source.tar.xz", source)
    third = {f"wheel-headers/{h}": wheel_headers for h in HEADERS}
    third |= {"third-party/cutlass/include/cute/a.hpp": b"", "third-party/cutlass/include/cutlass/b.h": b""}
    third |= {"third-party/fmt/include/fmt/base.h": b""}
    _tar_xz(part / "third-party.tar.xz", third)
    manifest = {
        "source": "deepseek-ai/DeepGEMM",
        "commit": "54e22612409371d6364144b69086735beb54e98b",
        "head": "0" * 40,
        "line": "deep_gemm/54e2261",
        "patches": [{"name": "0001-setup.patch", "sha256": "0" * 64}],
        "stand_in_wheel": {"filename": "sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl"},
    }
    (part / "MANIFEST.json").write_text(json.dumps(manifest))
    return root


def _tools(tmp: Path) -> dict[str, str]:
    python = tmp / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    nvcc = tmp / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    return {**os.environ, "PYTHON": str(python), "CUDA_HOME": str(tmp / "cuda")}


def _build(bundle: Path, root: Path, out: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    command = ["bash", str(REPO / "ci" / "build_deep_gemm.sh"), "--bundle", str(bundle), "--root", str(root)]
    return subprocess.run([*command, "--out", str(out), *args], env=env, capture_output=True, text=True)


def test_a_build_is_switched_in_recorded_and_reused(tmp_path):
    env, bundle, root = _tools(tmp_path), _bundle(tmp_path / "bundle"), tmp_path / "root"
    first = _build(bundle, root, tmp_path / "out1", env)
    assert first.returncode == 0, first.stdout + first.stderr
    key = os.readlink(root / "current").removeprefix("builds/")
    assert f"DEEP_GEMM_PATH={root}/current/DeepGEMM" in first.stdout and "built deep_gemm._C in" in first.stdout
    built_with = (root / "current" / "DeepGEMM" / "built-with.txt").read_text()
    assert "CC=" in built_with and "cutlass=" in built_with and "/third-party/fmt/include" in built_with
    assert (root / "current" / "DeepGEMM" / "deep_gemm" / "include" / "cute" / "a.hpp").is_file()
    record = json.loads((tmp_path / "out1" / "deep_gemm_build.json").read_text())
    assert (
        record["deep_gemm"]["source"] == "deepseek-ai/DeepGEMM" and record["deep_gemm"]["line"] == "deep_gemm/54e2261"
    )
    assert record["deep_gemm"]["built_with"]["torch"] == "2.11.0+cu130"
    assert record["deep_gemm"]["built_with"]["nvcc"] == "release 13.0, V13.0.88"
    assert record["headers_identical_to"] == "sgl-deep-gemm 0.2.3.post2"
    assert record["build"] == {**record["build"], "key": key, "how": "built"}
    assert (tmp_path / "out1" / f"deep_gemm-build-{key}.tar.gz").is_file()

    again = _build(bundle, root, tmp_path / "out2", env)
    assert again.returncode == 0 and f"build {key} is on this box already" in again.stdout
    assert not list((tmp_path / "out2").glob("deep_gemm-build-*"))

    carried = bundle / "deep_gemm" / f"deep_gemm-build-{key}.tar.gz"
    carried.write_bytes((tmp_path / "out1" / carried.name).read_bytes())
    fresh = _build(bundle, tmp_path / "fresh-root", tmp_path / "out3", {**env, "FAIL_BUILD": "1"})
    assert fresh.returncode == 0 and "restored from" in fresh.stdout, fresh.stdout + fresh.stderr


def test_a_build_cut_short_leaves_the_previous_one_in_place(tmp_path):
    env, root = _tools(tmp_path), tmp_path / "root"
    assert _build(_bundle(tmp_path / "old"), root, tmp_path / "out1", env).returncode == 0
    previous = os.readlink(root / "current")
    changed = _bundle(tmp_path / "new", wheel_headers=b"// another header\n")
    failed = _build(changed, root, tmp_path / "out2", {**env, "FAIL_BUILD": "1"})
    assert failed.returncode == 4 and "build failed" in failed.stdout
    assert os.readlink(root / "current") == previous and not list(root.glob("staging-*"))
    assert (tmp_path / "out2" / "deep_gemm_build.log").is_file()


def test_only_a_staging_folder_a_dead_build_left_is_removed(tmp_path):
    """The script began with `rm -rf ROOT/staging-*`: a second build on the same ROOT (the default is shared)
    removed the first's staging folder mid-build, and a `staging-` folder of the user's under --root went too.
    A `current` that is not the script's link was replaced by one."""
    env, root = _tools(tmp_path), tmp_path / "root"
    (root / "staging-mine").mkdir(parents=True)
    (root / "staging-mine" / "notes.txt").write_text("mine\n")
    running = root / f"staging-{os.getpid()}"  # a build in progress: its process alive
    running.mkdir()
    (running / ".sglpatch-staging").write_text("")
    dead = root / "staging-999999999"
    dead.mkdir()
    (dead / ".sglpatch-staging").write_text("")
    assert _build(_bundle(tmp_path / "b"), root, tmp_path / "out", env).returncode == 0
    assert (root / "staging-mine" / "notes.txt").read_text() == "mine\n" and running.is_dir() and not dead.exists()
    other = tmp_path / "other"
    (other / "current").mkdir(parents=True)
    refused = _build(_bundle(tmp_path / "b2"), other, tmp_path / "out2", env)
    assert refused.returncode == 2 and "is not the link this script keeps" in refused.stderr
    assert (other / "current").is_dir() and not (other / "current").is_symlink()


def test_headers_that_differ_from_the_wheels_are_recorded_as_not_identical(tmp_path):
    env = _tools(tmp_path)
    bundle = _bundle(tmp_path / "bundle", wheel_headers=b"// the wheel's own\n")
    assert _build(bundle, tmp_path / "root", tmp_path / "out", env).returncode == 0
    record = json.loads((tmp_path / "out" / "deep_gemm_build.json").read_text())
    assert record["headers_identical_to"] is None
    assert record["sm90_headers_sha256"]["build"] != record["sm90_headers_sha256"]["wheel"]


def test_the_runners_deep_gemm_source_option_records_the_build_in_their_results(tmp_path):
    env, bundle = _tools(tmp_path), _bundle(tmp_path / "bundle")
    out = tmp_path / "out"
    out.mkdir()
    script = f"""
REPO={REPO}; . "$REPO/ci/gpu_box.sh"; PY="$PYTHON"; OUTDIR={out}; say() {{ echo "[test] $*"; }}
box_options --deep-gemm source
use_deep_gemm {bundle} || exit $?
echo "PYTHONPATH=$PYTHONPATH"
echo '{{"rows": 3, "deep_gemm": "0.1.5.post1"}}' > {out}/result.json
"""
    env = {**env, "SGLPATCH_DEEP_GEMM_ROOT": str(tmp_path / "root")}
    run = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"PYTHONPATH={tmp_path}/root/current/DeepGEMM:" in run.stdout
    result = json.loads((out / "result.json").read_text())
    assert result["rows"] == 3 and result["deep_gemm_reported"] == "0.1.5.post1"
    assert result["deep_gemm"]["commit"].startswith("54e2261") and result["headers_identical_to"]
