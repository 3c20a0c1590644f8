"""bench/studies/run_gaps.py on a hand-made call: the gaps between runs by stretch of the call, and each probe file
read whole once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import run_gaps  # noqa: E402
from testing.probe_archives import probe_archive  # noqa: E402


def _call(tmp_path: Path) -> Path:
    """Two engines taking turns, 12 runs, each gap 0.01 s longer than the one before it."""
    host: dict[str, list] = {"pristine": [], "patched": []}
    t, gap = 100.0, 0.1
    for k in range(12):
        host[("pristine", "patched")[k % 2]].append({"window": [t, t + 0.5]})
        t, gap = t + 0.5 + gap, gap + 0.01
    row = {label: {"host_runs": runs} for label, runs in host.items()}
    path = tmp_path / "call.json"
    path.write_text(json.dumps({"meta": {}, "rows": [row]}))
    records = {"pristine": [{"t": 1.0 + k} for k in range(40)], "patched": [{"t": 2.0}]}
    probe_archive(tmp_path / "call_engines.tar.gz", records, "steps.jsonl")
    return path


def test_the_gaps_by_stretch_and_one_whole_read_of_each_file(tmp_path, capsys):
    path = _call(tmp_path)
    parts = run_gaps.gaps_by_part(run_gaps.windows(json.loads(path.read_text())))
    assert [p["gaps"] for p in parts] == [2, 2, 2, 2, 2, 1]
    assert parts[0]["median"] == pytest.approx(0.105) and parts[-1]["median"] == pytest.approx(0.2)
    found = run_gaps.whole_read_ms(tmp_path / "call_engines.tar.gz")
    assert list(found) == ["steps.jsonl"] and found["steps.jsonl"]["engine"] == "probe-n4-patched"
    assert found["steps.jsonl"]["records"] == 1
    assert run_gaps.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "12 timed runs" in out and "part 6 of 6: median 0.200" in out and "1 records" in out


def test_a_call_without_its_archive_is_refused_in_one_line(tmp_path, capsys):
    path = _call(tmp_path)
    (tmp_path / "call_engines.tar.gz").unlink()
    assert run_gaps.main([str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
