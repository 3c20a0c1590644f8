"""bench/engine_ab.py run end to end on a CPU against the stand-in engine (stand_in_engine_worker.py):
the folder a run writes in names what the stand-in stands in for (a crash, a divergence, a mutation)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import engine_ab

STAND_IN = Path(__file__).resolve().parent / "stand_in_engine_worker.py"
# next_n 2 and 4 over the targets grid, two timed runs of 6 tokens, the IndexShare case at next_n 3 and 2
DEFAULTS = ["--next-n", "2,4", "--grid", "targets", "--reps", "2", "--new-tokens", "6", "--seed-case", "3,2"]


def run_bench(tmp_path: Path, folder: str, *extra: str) -> tuple[int, dict]:
    """The driver's exit status and JSON; later options win over DEFAULTS."""
    out = tmp_path / folder / "engine.json"
    trees = ["--pristine", str(tmp_path / "pristine"), "--patched", str(tmp_path / "patched")]
    where = ["--workdir", str(tmp_path / folder / "work"), "--out", str(out), "--worker-script", str(STAND_IN)]
    status = engine_ab.main([*trees, *DEFAULTS, *where, *extra])
    return status, json.loads(out.read_text())
