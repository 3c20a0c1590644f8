"""bench/studies/floor_pool.py on hand-made floor calls (testing/probe_archives.floor_call): two calls of one speed
pool to a floor that holds 1 and is narrower than either's; an --aa-only call (pristine and a patched engine that
ran the pristine tree) pools with a three-engine call, TPOT from pristine_b's interval in the row; a call whose two
processes are 10% apart beside one whose are not shows heterogeneity, and the random-effects interval is named to
read; calls of different setups, or a call without two pristine processes, are refused in one line."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.engine.precision import ratio_interval  # noqa: E402
from bench.studies import floor_measures, floor_pool  # noqa: E402
from testing.probe_archives import FLOOR_ROUNDS, floor_call  # noqa: E402

ONE_SPEED = {"pristine": 16.0, "pristine_b": 16.0, "patched": 8.0}
BOOTS = 300


def _floor(*paths: Path) -> list[dict]:
    calls = [floor_measures.load(p) for p in paths]
    return floor_pool.pooled_floor(calls, [floor_measures.aa_pair(c) for c in calls], BOOTS, 0)


def _width(m: dict) -> float:
    return math.log(m["ci95"][1] / m["ci95"][0])


def test_two_calls_of_one_speed_pool_to_a_floor_that_holds_one_and_is_narrower(tmp_path):
    a, b = (floor_call(tmp_path, ONE_SPEED, name=name, seed=seed) for name, seed in (("a", 3), ("b", 4)))
    alone = [{(m["measure"], m["how"]): m for m in _floor(p)} for p in (a, b)]
    pooled = _floor(a, b)
    assert ("TPOT", "ratio of run means") in alone[0] and ("TPOT", "paired by round") not in alone[0]
    assert {(m["measure"], m["how"]) for m in pooled} == set(alone[0])
    for m in pooled:
        key = (m["measure"], m["how"])
        assert m["ci95"][0] < 1.0 < m["ci95"][1], m
        assert m["runs"] == [2 * FLOOR_ROUNDS] * 2, m
        # a made run's gaps are all one, so a percentile of the gaps is a few runs' and its bootstrap lumpy
        if m["how"] != "bootstrap over runs":
            assert _width(m) < min(_width(one[key]) for one in alone), m


def test_an_aa_only_call_pools_with_a_three_engine_call(tmp_path, capsys):
    three = floor_call(tmp_path, ONE_SPEED, name="three", seed=3)
    aa = floor_call(tmp_path, {"pristine": 16.0, "patched": 16.0}, name="aa", seed=4, patched_is_pristine=True)
    calls = [floor_measures.load(p) for p in (three, aa)]
    assert [floor_measures.aa_pair(c) for c in calls] == [("pristine", "pristine_b"), ("pristine", "patched")]
    pooled = {(m["measure"], m["how"]): m for m in _floor(three, aa)}
    tpot = pooled[("TPOT", "ratio of run means")]
    assert ("TPOT", "paired by round") not in pooled  # the three-engine row keeps no pristine_b TPOT run by run
    # pristine_b's TPOT runs, which the row keeps only as an interval, are its step intervals / 3 here
    values = [floor_measures.per_run(c) for c in calls]
    second = [v / 3 for v in values[0]["pristine_b"]["step interval"]] + values[1]["patched"]["tpot"]
    whole = ratio_interval(values[0]["pristine"]["tpot"] + values[1]["pristine"]["tpot"], second)
    assert tpot["ratio"] == pytest.approx(whole["ratio"], rel=1e-6)
    assert tpot["ci95"] == pytest.approx(whole["ci95"], rel=1e-6) and tpot["runs"] == [2 * FLOOR_ROUNDS] * 2
    assert tpot["ci95"][0] < 1.0 < tpot["ci95"][1]
    assert floor_pool.main([str(three), str(aa), "--boots", str(BOOTS)]) == 0
    out = capsys.readouterr().out
    assert "three.json, floor: pristine_b against pristine" in out and "aa.json, floor: patched against pristine" in out


def test_a_process_offset_in_one_call_shows_heterogeneity_and_the_random_effects_interval_is_read(tmp_path, capsys):
    even = floor_call(tmp_path, ONE_SPEED, name="even", seed=3)
    off = floor_call(tmp_path, {**ONE_SPEED, "pristine_b": 16.0 / 1.1}, name="off", seed=3)
    calls = [floor_measures.load(p) for p in (even, off)]
    pairs = [floor_measures.aa_pair(c) for c in calls]
    per_call = [floor_pool.pooled_floor([c], [p], BOOTS, 0) for c, p in zip(calls, pairs, strict=True)]
    found = floor_pool.heterogeneity([next(m for m in one if m["measure"] == "TPOT") for one in per_call])
    assert found["logs"][1] - found["logs"][0] == pytest.approx(math.log(1.1), rel=1e-6)  # one seed: same draws
    assert found["p"] < floor_pool.READ_POOLED_P and found["tau"] > 0
    pooled = next(m for m in floor_pool.pooled_floor(calls, pairs, BOOTS, 0) if m["measure"] == "TPOT")
    which, read = floor_pool.to_read(pooled, found)
    assert which == "random effects" and _width(read) > _width(pooled)
    assert floor_pool.main([str(even), str(off), "--boots", str(BOOTS)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  TPOT, ratio of run means: +"))
    assert "read the random effects interval" in line


def test_calls_of_one_floor_read_the_pooled_interval():
    found = floor_pool.heterogeneity([{"ratio": 1.01, "se_log": 0.02}, {"ratio": 0.99, "se_log": 0.02}])
    assert found["p"] > 0.4 and found["tau"] == 0.0
    assert found["random"]["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert floor_pool.to_read({"ratio": 1.0, "ci95": [0.98, 1.02]}, found)[0] == "pooled"


def test_chi_square_tail():
    for df, x95 in ((1, 3.841), (2, 5.991), (3, 7.815), (4, 9.488), (5, 11.070), (10, 18.307)):
        assert floor_pool.chi2_sf(x95, df) == pytest.approx(0.05, abs=2e-4), df
    assert floor_pool.chi2_sf(0.0, 3) == 1.0 and floor_pool.chi2_sf(1.0, 2) == pytest.approx(math.exp(-0.5))


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda doc: doc["rows"][0].update(ctx=32768), "b.json's ctx is 32768, a.json's 65536"),
        (
            lambda doc: doc["meta"].update(versions={"gpu": "NVIDIA H200"}),
            "b.json's gpu is 'NVIDIA H200', a.json's None",
        ),
        (lambda doc: doc["meta"].update(same_layout=True), "b.json's same_layout is True, a.json's False"),
    ],
)
def test_calls_of_different_setups_are_refused(tmp_path, capsys, change, says):
    """A case, a card or a layout rule of its own: each makes a floor of its own."""
    a = floor_call(tmp_path, ONE_SPEED, name="a", seed=3)
    b = floor_call(tmp_path, ONE_SPEED, name="b", seed=4)
    doc = json.loads(b.read_text())
    change(doc)
    b.write_text(json.dumps(doc))
    assert floor_pool.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_a_call_without_two_pristine_processes_is_refused(tmp_path, capsys):
    a = floor_call(tmp_path, ONE_SPEED, name="a", seed=3)
    ab = floor_call(tmp_path, {"pristine": 16.0, "patched": 8.0}, name="ab", seed=4)
    assert floor_pool.main([str(a), str(ab)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ab.json: no two pristine processes" in err
    assert floor_pool.main([str(a), str(a)]) == 2 and "two calls or more" in capsys.readouterr().err


def test_the_pooled_moments_are_the_runs_taken_as_one():
    runs = [[1.0, 1.2, 0.9], [1.1, 1.4, 0.8, 1.0]]
    joined = floor_pool.joined_moments([(len(r), statistics.fmean(r), statistics.stdev(r)) for r in runs])
    whole = runs[0] + runs[1]
    assert joined == pytest.approx((len(whole), statistics.fmean(whole), statistics.stdev(whole)))


def test_a_batch_size_a_call_lacks_a_missing_archive_or_a_patched_only_call_is_refused_in_one_line(tmp_path, capsys):
    a = floor_call(tmp_path, ONE_SPEED, name="a", seed=3)
    b = floor_call(tmp_path, ONE_SPEED, name="b", seed=4)
    assert floor_pool.main([str(a), str(b), "--batch-size", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a.json: no row at batch size 64 (rows at 32)" in err
    alone = floor_call(tmp_path, ONE_SPEED, name="alone", seed=5)
    doc = json.loads(alone.read_text())
    doc["meta"].update(engines=["patched"], patched_only=True)
    doc["rows"][0] = {k: v for k, v in doc["rows"][0].items() if k not in ("pristine", "aa_noise_processes")}
    doc["rows"][0].update(patched_only=True)
    alone.write_text(json.dumps(doc))
    assert floor_pool.main([str(a), str(alone)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "alone.json: a --patched-only call (no pristine engine ran)" in err
    b.with_name("b_engines.tar.gz").unlink()
    for main, argv in ((floor_pool.main, [str(a), str(b)]), (floor_measures.main, [str(b)])):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "b.json: no b_engines.tar.gz beside it" in err
