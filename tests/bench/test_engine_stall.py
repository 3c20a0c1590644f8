"""An engine that stops answering (the H200's next_n 2 call, docs/results/engine_h200_drafts_n2_stalled.log):
the driver gives up on it by the run's deadline, its processes write every thread's stack to its log
before they are stopped, and the run's JSON says which engine and where."""

from __future__ import annotations

import time

from engine_runs import run_bench


def test_a_stalled_engine_is_named_by_the_deadline_with_its_stacks_in_its_log(tmp_path):
    started = time.monotonic()
    status, doc = run_bench(
        tmp_path, "stall", "--next-n", "2", "--seed-case", "", "--deadline-s", "8", "--min-block-s", "1"
    )
    took = time.monotonic() - started
    assert status == 1 and doc["rows"] == []
    [note] = [note for note in doc["notes"] if "no answer" in note]
    assert note.startswith("next_n=2: TimeoutError: n2-pristine: no answer within ")
    assert note.endswith("its threads' stacks go to its log as it is stopped (log: engine-n2-pristine.log)")
    log = (tmp_path / "stall" / "work" / "engine-n2-pristine.log").read_text()
    assert "most recent call first" in log and "hang_as_a_stalled_engine_does" in log
    assert took < 40  # the warm-up's wait ends at the deadline, not after its own 300 s
