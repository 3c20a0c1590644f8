"""The worker takes a run's probe records only once the probe has written all of them: the probe writes a
timed record when its end event completes, in a pass every 50 ms, after the run's last token has streamed."""

from __future__ import annotations

import json
import threading
import time

from bench.engine_worker import EngineWorker


def _worker(probe_dir):
    worker = object.__new__(EngineWorker)  # no engine: _probe_records reads the probe's folder only
    worker.probe_dir = probe_dir
    worker.probe_files = {}
    return worker


def _late_probe(folder, t_run, delay_s: float) -> threading.Thread:
    """A probe whose last forward of the run is written ``delay_s`` after the run's end, then a pass with
    nothing pending, as the probe's flusher does."""

    def write():
        time.sleep(delay_s)
        with open(folder / "verify.jsonl", "a") as out:
            out.write(json.dumps({"t": t_run + 0.30, "gpu_ms": 3.0}) + "\n")
        (folder / "flushed.json").write_text(json.dumps({"t": time.time(), "pending": 0}))

    return threading.Thread(target=write)


def test_the_runs_last_forward_written_after_its_end_is_in_its_records(tmp_path):
    t_end = time.time()  # the run's last token has just streamed
    t_start = t_end - 0.35
    with open(tmp_path / "verify.jsonl", "w") as out:
        for k in range(3):
            out.write(json.dumps({"t": t_start + 0.1 * k, "gpu_ms": 3.0}) + "\n")
    (tmp_path / "flushed.json").write_text(json.dumps({"t": t_start + 0.2, "pending": 1}))
    probe = _late_probe(tmp_path, t_start, delay_s=0.15)
    probe.start()
    t0 = time.perf_counter()
    records = _worker(tmp_path)._probe_records("verify.jsonl", t_start, t_end)
    waited = time.perf_counter() - t0
    probe.join()
    assert [round(r["t"] - t_start, 2) for r in records] == [0.0, 0.1, 0.2, 0.3]
    assert waited < 1.0  # the probe's pass, not the 2 s limit


def test_without_a_flushing_probe_it_gives_up_after_two_seconds(tmp_path):
    t_start = time.time() - 1.0
    (tmp_path / "verify.jsonl").write_text(json.dumps({"t": t_start + 0.5, "gpu_ms": 3.0}) + "\n")
    t0 = time.perf_counter()
    records = _worker(tmp_path)._probe_records("verify.jsonl", t_start, t_start + 1.0)
    assert 1.9 < time.perf_counter() - t0 < 3.0
    assert len(records) == 1


def test_the_file_is_read_on_from_where_the_last_run_stopped(tmp_path):
    """Each run's records from the bytes written since the run before (a line half written is taken next
    time); records of runs gone by are not kept."""
    path = tmp_path / "verify.jsonl"
    (tmp_path / "flushed.json").write_text(json.dumps({"t": 1e12, "pending": 0}))
    worker = _worker(tmp_path)
    path.write_text("".join(json.dumps({"t": t}) + "\n" for t in (1.0, 1.1, 1.2)))
    assert [r["t"] for r in worker._probe_records("verify.jsonl", 1.0, 1.5)] == [1.0, 1.1, 1.2]
    with open(path, "a") as out:
        out.write(json.dumps({"t": 2.0}) + "\n" + '{"t": 2.')
    assert [r["t"] for r in worker._probe_records("verify.jsonl", 2.0, 2.5)] == [2.0]
    with open(path, "a") as out:
        out.write("1}\n" + json.dumps({"t": 3.0}) + "\n")
    assert [r["t"] for r in worker._probe_records("verify.jsonl", 2.0, 2.5)] == [2.0, 2.1]
    assert [r["t"] for r in worker._probe_records("verify.jsonl", 3.0, 3.5)] == [3.0]
    assert [r["t"] for r in worker.probe_files["verify.jsonl"].records] == [3.0]
