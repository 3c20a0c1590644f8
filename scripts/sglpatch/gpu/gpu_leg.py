"""One GPU CI leg: apply the series to an sglang, run its GPU tests, write junit + a JSON summary.

`make ci-gpu` / `sglpatch gpu-leg` (commands/gpu_leg.py). Steps, on a machine with a CUDA GPU:
1. `sglpatch apply --sglang PATH` (a checkout or an installed package folder; default the
   pinned base in build/sglang); "already applied" is fine.
2. upstream's test/registered/attention/unittests/dsa/test_dsa.py, where PATH is a checkout
   that has it (a package install has no test/ folder);
3. each test the series adds to sglang's tree (test/registered/...), run in the checkout; a
   package install has none, so they are missing there and a leg that requires them fails;
4. ci/dsa_kit_driver.py (sglang's own DSA test kit, always);
5. the project's tests/gpu (with pytest-xdist, file by file, where it is installed);
6. one junit file for all parts, one JSON summary (docs/ci/gpu-leg-summary.md), and the
   check against ci/leg-expectations.json; exit 1 when the leg fails the check.

Every part runs under the same Python (--python, default this one) with the patched tree
first on PYTHONPATH; each test's record comes from pytest's own junit report (xunit1, which
names each test's file, so the pytest nodeid is rebuilt exactly: ci_summary.tests_from_junit).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.errors import FatalError
from sglpatch.gpu import ci_summary
from sglpatch.lines import default_patch_dir
from sglpatch.project import PROJECT_ROOT, default_base_dir
from sglpatch.project_kind import SGLANG
from sglpatch.series import TEST_TREE_PREFIX, load_series, sha256_hex

UPSTREAM_TEST_DSA = "test/registered/attention/unittests/dsa/test_dsa.py"
KIT_DRIVER = "ci/dsa_kit_driver.py"
PROJECT_GPU_TESTS = "tests/gpu"
SCRIPTS_DIR = Path(__file__).resolve().parents[2]  # scripts/, which holds sglpatch/gpu/
SM_TO_LEG = {"9": "h100", "10": "b200"}

PYTEST_OPTIONS = ["-p", "no:cacheprovider", "-ra", "-o", "junit_family=xunit1"]


@dataclass
class Part:
    name: str
    what: str
    args: list[str]  # pytest or driver arguments after the Python executable
    cwd: Path
    required: bool = True
    status: str = "pending"  # ran | absent | error
    detail: str = ""
    returncode: int | None = None
    wall_s: float = 0.0
    tests: list[dict] = field(default_factory=list)


# -- the target ------------------------------------------------------------------------


def locate_sglang(path: Path) -> tuple[str, Path]:
    """(kind, import root): a checkout has python/sglang; a package folder is sglang/ itself."""
    path = path.resolve()
    package = path / SGLANG.package_prefix
    if (package / "__init__.py").is_file():
        return "checkout", package.parent
    if path.name == SGLANG.package and (path / "__init__.py").is_file():
        return "package", path.parent
    raise FatalError(f"{path}: neither an sglang checkout (python/sglang/) nor an sglang package folder")


def part_env(import_root: Path) -> dict:
    env = dict(os.environ)
    paths = [str(import_root), str(SCRIPTS_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["SGLPATCH_SGLANG_TREE"] = str(import_root)  # tests/gpu/test_seed_cuda_graph.py looks here
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def probe_environment(python: str, import_root: Path) -> dict:
    env = part_env(import_root)
    probe = [python, "-m", "sglpatch.gpu.gpu_environment"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FatalError(f"cannot run {python} to probe the GPU: {exc}") from None
    if out.returncode != 0:
        raise FatalError(f"probing the GPU with {python} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def apply_series(run_command, sglang: Path, patches: Path) -> dict:
    """`sglpatch apply` in this process (`run_command` is the CLI's own dispatcher), its output shown
    and kept."""
    argv = ["apply", "--sglang", str(sglang), "--patches", str(patches)]
    captured = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, captured)), contextlib.redirect_stderr(_Tee(sys.stderr, captured)):
        returncode = run_command(argv)
    text = captured.getvalue().strip()
    return {"command": shlex.join(["sglpatch", *argv]), "returncode": returncode, "output_tail": text[-2000:]}


class _Tee(io.TextIOBase):
    def __init__(self, *sinks):
        self.sinks = sinks

    def write(self, text: str) -> int:
        for sink in self.sinks:
            sink.write(text)
        return len(text)

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()


# -- parts -------------------------------------------------------------------------------


def series_sglang_tests(patch_dir: Path) -> list[str]:
    """The test files the series adds to (or changes in) sglang's own test tree."""
    paths = load_series(patch_dir).touched_paths
    return [p for p in paths if p.startswith(TEST_TREE_PREFIX) and p.rsplit("/", 1)[-1].startswith("test_")]


def _sglang_tree_part(name: str, what: str, test: str, kind: str, sglang: Path, required: bool) -> Part:
    part = Part(
        name, what, ["-m", "pytest", test, f"--rootdir={sglang}", *PYTEST_OPTIONS], cwd=sglang, required=required
    )
    if kind != "checkout" or not (sglang / test).is_file():
        part.status = "absent"
        part.detail = f"{'the package install' if kind != 'checkout' else 'this checkout'} has no {test}"
    return part


def plan_parts(
    kind: str, sglang: Path, leg: str, parts_dir: Path, leg_command: str, jobs: int, sglang_tests: list[str] = ()
) -> list[Part]:
    pytest_common = PYTEST_OPTIONS
    parts = [
        _sglang_tree_part("upstream-test-dsa", f"upstream {UPSTREAM_TEST_DSA}", UPSTREAM_TEST_DSA, kind, sglang, False)
    ]
    for test in sglang_tests:
        stem = test.rsplit("/", 1)[-1].removesuffix(".py")
        parts.append(
            _sglang_tree_part(f"series-{stem}", f"the series' test in sglang's tree, {test}", test, kind, sglang, True)
        )
    parts.append(
        Part(
            "dsa-kit",
            "sglang's DSA test kit through ci/dsa_kit_driver.py",
            [
                KIT_DRIVER,
                "--junit",
                str(parts_dir / "dsa-kit.xml"),
                "--summary",
                str(parts_dir / "dsa-kit.json"),
                "--expect",
                "patched",
                "--label",
                f"leg-{leg}",
                "--command",
                leg_command,
                "--",
                "-o",
                "junit_family=xunit1",
            ],
            cwd=PROJECT_ROOT,
        )
    )
    xdist = ["-n", str(jobs), "--dist", "loadfile"] if jobs > 1 else []
    parts.append(
        Part(
            "project-gpu",
            "the project's tests/gpu",
            ["-m", "pytest", PROJECT_GPU_TESTS, *xdist, *pytest_common],
            cwd=PROJECT_ROOT,
        )
    )
    return parts


def run_part(part: Part, python: str, import_root: Path, parts_dir: Path, timeout: int) -> None:
    junit = parts_dir / f"{part.name}.xml"
    log = parts_dir / f"{part.name}.log"
    for stale in (junit, log):  # an earlier run's files must not stand in for this one's
        stale.unlink(missing_ok=True)
    args = list(part.args)
    if args[:2] == ["-m", "pytest"]:
        args.append(f"--junitxml={junit}")
    print(f"[gpu-leg] {part.name}: {python} {shlex.join(args)}  (in {part.cwd})", flush=True)
    start = time.monotonic()
    expired = threading.Event()
    try:
        with open(log, "w", encoding="utf-8") as sink:
            proc = subprocess.Popen(
                [python, *args],
                cwd=part.cwd,
                env=part_env(import_root),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # one process group: a timeout also ends xdist workers
            )

            def kill():
                expired.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

            watchdog = threading.Timer(timeout, kill)
            watchdog.start()
            try:
                for line in proc.stdout:
                    sys.stdout.write(line)
                    sink.write(line)
                part.returncode = proc.wait()
            finally:
                watchdog.cancel()
    except OSError as exc:
        part.status, part.detail = "error", f"could not start: {exc}"
    if expired.is_set():
        part.status, part.detail = "error", f"timed out after {timeout} s; see {log.name}"
    part.wall_s = round(time.monotonic() - start, 1)
    if junit.is_file():
        part.tests = ci_summary.tests_from_junit(junit, part.name)
    for test in part.tests:
        test["part"] = part.name
    if part.status == "pending":
        # pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else did not run properly
        if part.returncode in (0, 1, 5):
            part.status = "ran"
        else:
            part.status = "error"
            part.detail = f"exit status {part.returncode}; see {log.name}"


# -- the leg -------------------------------------------------------------------------------


def series_record(patch_dir: Path) -> dict:
    series = load_series(patch_dir)
    return {
        "digest": series.digest(),
        "patches": [
            {
                "name": p.name,
                "sha256": sha256_hex(p.data),
                "patch_group": p.trailer("Patch-Group"),
                "upstream_pr": p.trailer("Upstream-PR"),
                "extends_pr": p.trailer("Extends-PR"),
            }
            for p in series.patches
        ],
    }


def build_summary(*, leg, command, env, sglang, kind, import_root, series, applied, parts, started, wall) -> dict:
    tests = [t for part in parts for t in part.tests]
    summary = {
        "schema": ci_summary.SCHEMA,
        "leg": leg,
        "command": command,
        "started_utc": started,
        "wall_s": wall,
        "runner": {k: os.environ.get(v) for k, v in (("name", "RUNNER_NAME"), ("run_url", "SGLPATCH_RUN_URL"))},
        "environment": env,
        "sglang": {"path": str(sglang), "kind": kind, "import_root": str(import_root)},
        "series": series,
        "apply": applied,
        "parts": [
            {
                "name": p.name,
                "what": p.what,
                "command": shlex.join(["python", *p.args]),
                "cwd": str(p.cwd),
                "required": p.required,
                "status": p.status,
                "detail": p.detail,
                "returncode": p.returncode,
                "wall_s": p.wall_s,
                "tests": len(p.tests),
            }
            for p in parts
        ],
        "tests": tests,
        "counts": ci_summary.count_outcomes(tests),
    }
    summary["gpu_tests_ran"] = ci_summary.gpu_tests_ran(summary)
    return summary


def _beside(stem: Path, suffix: str) -> Path:
    """STEM.json, STEM.xml: the stem's whole name and the suffix (`with_suffix` would take `.run2` of `h100.run2`
    for a suffix and write `h100.json`, another file than the one `--out` names)."""
    return stem.with_name(stem.name + suffix)


def run_leg(args, command: str, run_command) -> int:
    """The leg, for `sglpatch gpu-leg` (its options in `args`); `run_command` runs `sglpatch apply`."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    sglang = (args.sglang or default_base_dir()).resolve()
    patch_dir = (args.patches or default_patch_dir()).resolve()
    kind, import_root = locate_sglang(sglang)
    expectations = ci_summary.load_expectations(args.expectations)
    series = series_record(patch_dir)

    applied = {"command": None, "returncode": None, "output_tail": "skipped (--skip-apply)"}
    apply_problem = None
    if not args.skip_apply:
        applied = apply_series(run_command, sglang, patch_dir)
        if applied["returncode"] != 0:  # still write a summary: the reader must see why nothing ran
            last = (applied["output_tail"].splitlines() or ["no output"])[-1]
            apply_problem = f"the series did not apply to {sglang}: {last}"

    env = probe_environment(args.python, import_root)
    major = (env.get("compute_capability") or "").split(".")[0]
    leg = args.leg if args.leg != "auto" else SM_TO_LEG.get(major, "unknown")
    stem = args.out or (PROJECT_ROOT / "build" / "ci" / f"gpu-leg-{leg}")
    stem = stem.resolve()
    parts_dir = stem.parent / f"{stem.name}.parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"[gpu-leg] leg {leg}: {env.get('gpu') or 'no CUDA GPU'} (SM {env.get('compute_capability')}), "
        f"torch {env.get('torch')}, DeepGEMM {env.get('deep_gemm')}; sglang {kind} {sglang}",
        flush=True,
    )

    jobs = args.jobs if env.get("xdist") else 1
    parts = plan_parts(kind, sglang, leg, parts_dir, command, jobs, series_sglang_tests(patch_dir))
    for part in parts:  # files of an earlier run into the same --out must not be merged as this run's
        for suffix in (".xml", ".log"):
            (parts_dir / f"{part.name}{suffix}").unlink(missing_ok=True)
    for part in parts:
        if part.status == "absent":
            print(f"[gpu-leg] {part.name}: not run: {part.detail}", flush=True)
            continue
        if apply_problem:
            part.status, part.detail = "error", "not run: the series did not apply"
            continue
        run_part(part, args.python, import_root, parts_dir, args.timeout)

    summary = build_summary(
        leg=leg,
        command=command,
        env=env,
        sglang=sglang,
        kind=kind,
        import_root=import_root,
        series=series,
        applied=applied,
        parts=parts,
        started=started,
        wall=round(time.monotonic() - t0, 1),
    )
    if leg in expectations["legs"]:
        problems = ci_summary.check_leg(summary, leg, expectations)
    else:
        problems = [f"no expectations for leg {leg!r} (GPU {env.get('gpu')}, SM {env.get('compute_capability')})"]
    if apply_problem:
        problems.insert(0, apply_problem)
    summary["check"] = {"ok": not problems, "problems": problems}
    # every part's junit is PARTS/<name>.xml (the kit driver is told so by --junit)
    summary_path, junit_path = _beside(stem, ".json"), _beside(stem, ".xml")
    ci_summary.merge_junit([(p.name, parts_dir / f"{p.name}.xml") for p in parts], junit_path)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    c = summary["counts"]
    print(
        f"[gpu-leg] {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped "
        f"-> {summary_path}, {junit_path}",
        flush=True,
    )
    for problem in problems:
        print(f"[gpu-leg] FAIL {problem}", flush=True)
    print(f"[gpu-leg] leg {leg}: {'passed' if not problems else 'FAILED'}", flush=True)
    return 0 if not problems else 1
