"""Time `sglpatch apply` on the embedded default base, against plain `git am`, in one run.

Both start from the cached wheel. Rows: building the base from the wheel,
applying the series with sglpatch (check-first, workspace, branch switch) and
with `git am` on an identical base, and the whole cold `make apply` path.
Prints a table with the ratio sglpatch / git am. Goal: cold apply < 10 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sglpatch.git import init_repo
from sglpatch.lines import default_patch_dir
from sglpatch.pin import load_pin
from sglpatch.rebase.releases import check_out_release
from sglpatch.series import load_series
from sglpatch.wheels import fetch_wheel

ROUNDS = 3


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def progress(message: str, started: float) -> None:
    """The rounds take about 40 s before the table: say where they are (stderr, so stdout stays the table)."""
    print(f"... {message} ({time.perf_counter() - started:.0f} s so far)", file=sys.stderr, flush=True)


def main() -> int:
    patches = default_patch_dir()
    pin, series = load_pin(patches), load_series(patches)
    wheel = fetch_wheel(pin.release, pin.wheel)
    rows = {"base from wheel": [], "sglpatch apply": [], "git am": [], "cold make apply": []}
    started = time.perf_counter()
    for number in range(1, ROUNDS + 1):
        progress(
            f"round {number}/{ROUNDS}: two bases from the wheel, sglpatch apply, git am, a cold make apply", started
        )
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for name in ("ours", "theirs"):
                rows["base from wheel"].append(
                    timed(lambda n=name: check_out_release(init_repo(tmp / n), pin.release, wheel, date=pin.date))
                )
            rows["sglpatch apply"].append(
                timed(lambda: run([sys.executable, "-m", "sglpatch", "apply", "--sglang", str(tmp / "ours")]))
            )
            am = ["git", "-C", str(tmp / "theirs"), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
            rows["git am"].append(
                timed(lambda: run([*am, "am", "-q", "--keep-non-patch", *[str(p.path) for p in series.patches]]))
            )
            project = tmp / "project"
            (project / "patches" / patches.name).mkdir(parents=True)
            for f in patches.iterdir():
                (project / "patches" / patches.name / f.name).write_bytes(f.read_bytes())
            env_cmd = ["env", f"SGLPATCH_PROJECT={project}", sys.executable, "-m", "sglpatch", "apply"]
            rows["cold make apply"].append(timed(lambda: run(env_cmd)))
    ours, theirs = statistics.median(rows["sglpatch apply"]), statistics.median(rows["git am"])
    print(f"sglang {pin.release}, {len(series.patches)} patches, median of {ROUNDS} rounds (wheel cached)")
    print(f"{'step':<18}{'median s':>10}{'min s':>8}{'max s':>8}")
    for name, values in rows.items():
        print(f"{name:<18}{statistics.median(values):>10.2f}{min(values):>8.2f}{max(values):>8.2f}")
    print(f"ratio sglpatch apply / git am: {ours / theirs:.2f}x")
    cold = statistics.median(rows["cold make apply"])
    print(f"cold make apply (base + series): {cold:.2f} s, goal < 10 s: {'met' if cold < 10 else 'MISSED'}")
    return 0


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    raise SystemExit(main())
