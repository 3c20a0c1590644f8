"""Every engine of a run must fit the GPU at once: the estimate (bench/engine/memory.py) against the
committed H200 runs, and the refusal before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import engine_ab, engine_model
from bench.engine import grid, memory, sizing

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
H200_GIB = 139.8  # the total torch's OOM message gives for the H200 (141 GB)
# The grid that ran out of memory in its third engine on v0.5.23 (next_n 3, three engines, 2.16M
# pool tokens each): 96 requests x 16k beside 64 x 32k ragged (more than 132 verify rows).
ABOVE_132_ROWS = [(96, 16384, "uniform"), (64, 32768, "ragged")]


def test_every_committed_run_fits_but_the_one_that_ran_out_of_memory():
    verdicts = {}
    for path in sorted(RESULTS.glob("engine_h200_*.json")):
        doc = json.loads(path.read_text())
        if path.name != "engine_h200.json" and "kv_cache_dtype" in doc["meta"].get("engine_args", {}):
            verdicts[path.name] = memory.run_verdict(doc, H200_GIB)
    assert len(verdicts) >= 20
    assert {name for name, v in verdicts.items() if "does not fit" in v} == {"engine_h200_tpot_wide_long_oom.json"}
    # the other two that ran out fit, but their indexers each sized a prefill's logits as if they owned the GPU
    uncapped_oom = {"engine_h200_v0_5_23_n2_pairs_source_oom.json", "engine_h200_v0_5_23_n2_16k_source_oom.json"}
    assert {name for name, v in verdicts.items() if v.endswith("ran out of GPU memory")} == {
        "engine_h200_tpot_wide_long_oom.json",
        *uncapped_oom,
    }
    for name in uncapped_oom:
        assert "fits, indexer logits not held to the room; ran out" in verdicts[name]
    # the closest fit: three engines of 2.9M FP8 tokens at 32 x 64k (run1 of the TPOT runs)
    assert (
        verdicts["engine_h200_tpot_run1.json"]
        == "3 engines x 2900000 fp8_e4m3 tokens: 139.3 of 139.8 GiB, fits, indexer logits not held to the room; ran"
    )


def test_one_engine_is_weights_context_pool_graphs_and_sglangs_activation_reserve():
    wide = sizing.sizing_for(grid.GRIDS["wide"], 96, 8)
    args = sizing.engine_args(Path("M"), 4, wide, sizing.KV_CACHES["fp8_e4m3"])
    one = memory.footprint(args, engine_model.dsa_config(4))
    params = engine_model.param_counts(engine_model.dsa_config(4))
    assert one.weights == pytest.approx(2 * (params["target"] + params["draft"]) / 2**30)
    # 4 target layers and the draft's one, each 656 bytes of FP8 MLA cache and 132 of index keys a token
    assert one.kv_pool == pytest.approx(wide.kv_tokens * 5 * (656 + 132) / 2**30)
    assert one.graphs == pytest.approx(0.017 * 128)
    assert one.activations == pytest.approx((512 + 1.5 * 16384) / 1024)


def _argv(tmp_path, *extra):
    out = ["--pristine", str(tmp_path), "--patched", str(tmp_path), "--out", str(tmp_path / "o" / "e.json")]
    return [*out, "--workdir", str(tmp_path / "w"), "--line", "v0.5.23", "--next-n", "3", *extra]


def test_engines_that_do_not_fit_together_are_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(grid.GRIDS, "above132", ABOVE_132_ROWS)
    argv = _argv(tmp_path, "--grid", "above132", "--two-process-aa", "--gpu-memory-gib", str(H200_GIB))
    assert engine_ab.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("engine_ab: --grid above132: 3 engines need about 150.2 GiB of the GPU's 139.8 (each: ")
    assert "kv pool 13.8" in err and "activations 24.5" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()
    # two engines of it fit, and so do three with the FP8 KV cache, with a note that the room is small
    two = memory.plan(_grid_args(ABOVE_132_ROWS, "bfloat16"), engine_model.dsa_config(4), 2, H200_GIB)
    fp8 = memory.plan(_grid_args(ABOVE_132_ROWS, "fp8_e4m3"), engine_model.dsa_config(4), 3, H200_GIB)
    assert two["fits"] and fp8["fits"] and fp8["total_gib"] == pytest.approx(134.3)
    assert memory.tight(fp8).startswith("memory: 3 engines estimated at 134.3 of 139.8 GiB; 5.5 GiB to spare")
    assert memory.tight(two) is None


def _grid_args(cases, kv):
    return sizing.engine_args(Path("M"), 3, sizing.sizing_for(cases, 48, 4), sizing.KV_CACHES[kv])


def test_no_check_without_the_gpus_size_or_across_gpus():
    wide = _grid_args(grid.GRIDS["wide_long"], "fp8_e4m3")
    assert memory.plan(wide, engine_model.dsa_config(4), 3, None)["fits"] is None
    assert memory.refusal(memory.plan(wide, engine_model.dsa_config(4), 3, None), "--grid wide_long") is None


def test_check_memory_prints_the_estimate_and_starts_nothing(tmp_path, capsys):
    argv = _argv(tmp_path, "--grid", "drafts", "--seed-case", "3", "--two-process-aa", "--kv-cache", "fp8_e4m3")
    assert engine_ab.main([*argv, "--gpu-memory-gib", str(H200_GIB), "--check-memory"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans["memory_plan"]["fits"] and plans["memory_plan"]["engines"] == 3
    assert plans["memory_plan_seed_case"]["engines"] == 3  # pristine, patched and the patched tree's eager reference
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()


def test_where_the_room_is_tight_each_engines_indexer_logits_are_held_to_a_share_of_it():
    """H200, 4 Dec 2026: three engines of 1.7M FP8 tokens (12.1 GiB to spare) ran out of memory in the DSA
    indexer's prefill top-k, which asked 7.4 GiB: sglang sizes those logits per engine as if it owned the GPU
    (up to 11.2 GiB at mem_fraction_static 0.6). Where the room is tight the run holds them to a quarter of
    it each (half the room, split three ways) through sglang's own variable, and says so."""
    doc = json.loads((RESULTS / "engine_h200_v0_5_23_n2_16k_source_oom.json").read_text())
    args = doc["meta"]["engine_args"]
    plan = memory.plan(args, doc["meta"]["model"], 3, H200_GIB)
    assert memory.logits_budget_gib(args, H200_GIB) == pytest.approx(11.18, abs=0.01)
    fraction, note = memory.logits_cap(plan, args)
    held = memory.logits_budget_gib(args, H200_GIB, float(fraction))
    assert held == pytest.approx((H200_GIB - plan["total_gib"]) / 6, abs=0.01) and held < 2.1
    assert note.startswith(f"memory: each engine's indexer logits held to 2.0 GiB ({memory.LOGITS_FRACTION_ENV}=0.03")
    # room enough (one engine of the same size): sglang's own size stays
    assert memory.logits_cap(memory.plan(args, doc["meta"]["model"], 1, H200_GIB), args) is None


def test_the_run_hands_the_cap_to_every_engine_unless_the_command_line_sets_it(tmp_path, monkeypatch):
    seen = []

    class Started(Exception):
        pass

    def bench(args, meta, *rest):
        seen.append(meta["env"])
        raise Started

    monkeypatch.setattr("bench.engine.driver.Bench", bench)
    argv = _argv(tmp_path, "--grid", "one_call_16k", "--two-process-aa", "--kv-cache", "fp8_e4m3")
    for extra in ([], ["--env", f"{memory.LOGITS_FRACTION_ENV}=0.1"]):
        with pytest.raises(Started):
            engine_ab.main([*argv, "--gpu-memory-gib", str(H200_GIB), *extra])
    assert float(seen[0][memory.LOGITS_FRACTION_ENV]) == pytest.approx(0.036, abs=0.002)
    assert seen[1][memory.LOGITS_FRACTION_ENV] == "0.1"
