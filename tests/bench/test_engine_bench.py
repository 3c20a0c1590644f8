"""CPU checks of the engine benchmark (bench/engine_ab.py, bench/engine/, engine_worker.py, engine_model.py, engine_probe).

- sglang accepts the model and the arguments: ServerArgs resolves and both models build on the
  meta device (tests/bench/engine_cpu_check.py, in a process of its own);
- the driver runs end to end against a stand-in for the GPU engine (stand_in_engine_worker.py:
  the real command loop, a synthetic engine), and its rows say what the runs say;
- the pieces a row is made of, on hand-made runs;
- prompts are prefixes of the pool's (what lets the radix cache serve every case);
- the probe's post-import hook wraps a module sglang-style, and finds a seed under either name;
- the probe times each part of a decode step (stand-in CUDA events on CPU) and rows report them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from bench import engine_ab, engine_model, engine_worker
from bench.engine import compare, grid, measures, processes, rows, schedule, sizing

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "engine_probe"))

import engine_probe_hooks  # noqa: E402
from engine_runs import run_bench  # noqa: E402  (this folder, as pytest puts it on the path)


@pytest.fixture(scope="module")
def cpu_checks(tmp_path_factory):
    """Both checks of engine_cpu_check.py, in one process (sglang and torch imported once): the default
    engine (4 layers, IndexShare, next_n 3), then the FP8 KV cache at the widest grid (1 layer, next_n 4)."""
    model = engine_model.write_model(tmp_path_factory.mktemp("model"), 4, index_share=True)
    fp8_model = engine_model.write_model(tmp_path_factory.mktemp("fp8-model"), 1)
    checks = [str(model), "3", "+", str(fp8_model), "4", "fp8_e4m3", "wide_long"]
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bench" / "engine_cpu_check.py"), *checks],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    default, fp8 = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    return {"default": default, "fp8": fp8}


@pytest.fixture
def cpu_check(cpu_checks):
    return cpu_checks["default"]


def test_sglang_resolves_the_engine_arguments_with_its_defaults(cpu_check):
    args = cpu_check["server_args"]
    assert args["speculative_algorithm"] == "EAGLE"
    assert (args["speculative_num_steps"], args["speculative_num_draft_tokens"], args["speculative_eagle_topk"]) == (
        2,
        3,
        1,
    )
    assert args["page_size"] == 64
    # sglang's defaults stay on: overlap scheduler, decode CUDA graphs, radix cache.
    assert args["disable_overlap_schedule"] is False
    assert args["disable_cuda_graph"] is False
    assert args["disable_radix_cache"] is False
    assert args["dsa_decode_backend"] == "flashmla_sparse"
    assert 64 in args["cuda_graph_bs_decode"] and 32 in args["cuda_graph_bs_decode"]
    assert args["speculative_draft_model_path"]  # filled in by sglang: the NextN layer of the same folder
    assert cpu_check["index_share_for_mtp_iteration"] is True
    assert cpu_check["dsa_index_topk"] == 2048


def test_sglang_takes_the_fp8_kv_cache_with_its_hopper_backends_and_the_widest_grid(cpu_checks):
    args = cpu_checks["fp8"]["server_args"]
    assert (args["kv_cache_dtype"], args["dsa_prefill_backend"], args["dsa_decode_backend"]) == (
        "fp8_e4m3",
        "flashmla_kv",
        "flashmla_kv",
    )
    # 128 requests and 128k contexts, as sglang resolves them
    assert (args["max_running_requests"], max(args["cuda_graph_bs_decode"])) == (128, 128)
    assert args["context_length"] == 131072 + 1024


def test_sglang_builds_v32_layers_and_a_moe_nextn_from_the_config(cpu_check):
    target, draft = cpu_check["target"], cpu_check["draft"]
    assert target["class"] == "DeepseekV32ForCausalLM" and target["layers"] == 4
    assert target["mlp"] == ["DeepseekV2MLP"] * 4 and target["ffn_width"] == 18432
    assert (target["heads"], target["kv_lora_rank"]) == (128, 512)
    assert (target["indexer_heads"], target["indexer_head_dim"], target["indexer_topk"]) == (64, 128, 2048)
    assert draft["class"] == "DeepseekV3ForCausalLMNextN" and draft["mlp"] == "DeepseekV2MoE"
    assert draft["experts"] == 32
    # bf16 weights of one engine fit beside a second engine and two KV pools on one H200.
    assert (target["params"] + draft["params"]) * 2 < 12e9
    # what the memory check counts (bench/engine/memory.py) is what sglang builds
    counts = engine_model.param_counts(engine_model.dsa_config(4, index_share=True))
    assert (target["params"], draft["params"]) == (counts["target"], counts["draft"])


def test_config_is_v32_per_layer_and_refuses_no_layers():
    config = engine_model.dsa_config(6)
    for key, value in engine_model.V32_ATTENTION.items():
        assert config[key] == value
    assert config["first_k_dense_replace"] == 6 and "index_share_for_mtp_iteration" not in config
    with pytest.raises(ValueError):
        engine_model.dsa_config(0)


def test_prompts_are_prefixes_of_the_pool_prompts():
    long = engine_worker.prompt_ids(3, 9000, 32000)
    short = engine_worker.prompt_ids(3, 4097, 32000)
    assert short == long[:4097] and len(long) == 9000
    assert engine_worker.prompt_ids(4, 4097, 32000) != short
    assert min(long) >= engine_worker.MIN_TOKEN_ID and max(long) < 32000


def test_a_worker_draws_each_prompt_once_and_hands_each_request_its_own_list():
    prompts = engine_worker.PromptCache(32000)
    short = prompts.ids(3, 4097)
    assert short == engine_worker.prompt_ids(3, 4097, 32000)
    long = prompts.ids(3, 9000)  # longer than any drawn: drawn again, the shorter one its prefix
    assert long == engine_worker.prompt_ids(3, 9000, 32000) and long[:4097] == short
    built = prompts.built[3]
    again = prompts.ids(3, 4097)
    again[0] = -1  # sglang may keep or change what it is handed: the next request is not touched
    assert prompts.ids(3, 4097) == short and prompts.built[3] is built


def test_every_case_fits_the_pool_and_asks_for_distinct_prompts():
    for cases in grid.GRIDS.values():
        for spec in cases:
            case = grid.Case(*spec, 8)
            requests = case.requests()
            assert len(requests) == case.batch_size
            assert sorted(r["prompt"][0] for r in requests) == list(range(case.batch_size))
            for r in requests:
                assert case.ctx // 2 <= r["prompt"][1] <= case.ctx <= grid.MAX_CTX
    with pytest.raises(ValueError):
        grid.Case(grid.POOL_PROMPTS + 1, 4096, "uniform", 8).requests()
    with pytest.raises(ValueError):
        grid.Case(1, 2 * grid.MAX_CTX, "uniform", 8).requests()


def _run(gpu_ms, bs=4, outputs=None, t0=0.0):
    verify = [
        {"t": t0 + i, "batch_size": bs, "profiled": False, "gpu_ms": ms, "graph": True} for i, ms in enumerate(gpu_ms)
    ]
    verify.append({"t": t0 + 99, "batch_size": bs - 1, "profiled": False, "gpu_ms": 999.0, "graph": True})
    return {"verify": verify, "outputs": outputs or [{"output_ids": [1, 2, 3], "tpot_ms": 2.0, "meta": {}}]}


def test_verify_step_leaves_out_warmup_steps_and_other_batch_sizes():
    runs = [_run([9.0, 9.0, 1.0, 1.0, 1.2]), _run([9.0, 9.0, 1.1, 1.1, 1.1])]
    assert measures.verify_step_us(runs, 4, skip=2) == pytest.approx(1100.0)
    assert measures.verify_step_us(runs, 4, skip=0) == pytest.approx(1150.0)
    assert measures.verify_step_us(runs, 7, skip=2) is None


def test_step_interval_is_the_gap_between_verify_starts():
    runs = [_run([1.0] * 6, t0=0.0), _run([1.0] * 6, t0=100.0)]
    for run in runs:
        for i, r in enumerate(r for r in run["verify"] if r["batch_size"] == 4):
            r["t"] = run["verify"][0]["t"] + 0.008 * i + (0.5 if i == 0 else 0.0)
    # the first (slow) gap is left out with skip=1; the batch-size-3 record is ignored
    assert measures.step_interval_ms(runs, 4, skip=1) == pytest.approx(8.0)


def _part_record(part, t, bs=4, gpu=1.0, host=2.0, graph=None):
    record = {"t": t, "part": part, "batch_size": bs, "gpu_ms": gpu, "host_ms": host}
    if graph is not None:
        record["graph"] = graph
    return record


def test_step_parts_are_medians_per_part_without_warmup_or_other_batch_sizes():
    run = {
        "steps": [_part_record("draft_extend", 0, gpu=50.0, host=90.0, graph=False)]  # warm-up, left out
        + [_part_record("draft_extend", i, gpu=2.0 + i, host=5.0 + i, graph=i % 2 == 0) for i in (1, 2, 3, 4)]
        + [_part_record("step", i, gpu=10.0, host=11.0) for i in range(3)]
        + [_part_record("draft_extend", 9, bs=3, gpu=99.0, host=99.0, graph=True)]
    }
    parts = measures.step_parts([run], 4, skip=1)
    assert set(parts) == {"draft_extend", "step"}
    assert parts["draft_extend"] == {
        "gpu_ms": pytest.approx(4.5),
        "host_ms": pytest.approx(7.5),
        "host_ms_max": pytest.approx(9.0),
        "samples": 4,
        "graph": 0.5,
    }
    assert parts["step"]["samples"] == 2 and "graph" not in parts["step"]
    # every batch size (the IndexShare case): the bs=3 record counts, nothing is skipped
    assert measures.step_parts([run], None, skip=0)["draft_extend"]["samples"] == 6
    assert measures.step_parts([{"verify": []}], 4, skip=0) == {}


def test_pool_holds_only_the_prompts_the_grid_asks_for_each_to_its_longest_prefix():
    pool = grid.pool_for([(8, 65536, "uniform")])
    assert [r["prompt"] for r in pool] == [[i, 65536] for i in range(8)]
    # the earlier runs' pool: 32 prompts of 64k, 32 more of 16k
    full = grid.pool_for(grid.GRIDS["full"])
    assert len(full) == 64 and sum(r["prompt"][1] for r in full) == 32 * 65536 + 32 * 16384
    wide_long = grid.pool_for(grid.GRIDS["wide_long"])
    assert [r["prompt"] for r in wide_long[7:9]] == [[7, 131072], [8, 16384]] and len(wide_long) == 128
    ragged = grid.pool_for([(4, 16384, "ragged")])
    assert [r["prompt"][1] for r in ragged] == [r["prompt"][1] for r in grid.Case(4, 16384, "ragged", 1).requests()]


def test_engines_are_sized_for_their_grid():
    wide_long = sizing.sizing_for(grid.GRIDS["wide_long"], new_tokens=96, reps=8)
    assert (wide_long.max_bs, wide_long.max_ctx) == (128, 131072)
    pool = 8 * 131072 + 120 * 16384
    assert wide_long.needed_kv_tokens == pool + 10 * 136 * 112 + 8 * 1040
    assert (
        wide_long.kv_tokens % 100_000 == 0
        and wide_long.needed_kv_tokens <= wide_long.kv_tokens < wide_long.needed_kv_tokens + 100_000
    )
    args = sizing.engine_args(Path("M"), 4, wide_long, {})
    assert args["cuda_graph_bs_decode"][-3:] == [64, 96, 128] and args["max_running_requests"] == 128
    assert args["context_length"] == 131072 + 1024 and args["max_total_tokens"] == wide_long.kv_tokens
    # a grid of at most 64 requests keeps the graphs every earlier run captured
    small = sizing.engine_args(Path("M"), 4, sizing.sizing_for(grid.GRIDS["sizes"], 96, 8), {})
    assert small["cuda_graph_bs_decode"] == [1, 2, 4, 8, 12, 16, 24, 32, 48, 64] and small["max_running_requests"] == 64


def test_a_kv_pool_too_small_for_the_grid_is_refused_before_anything_starts(tmp_path, capsys):
    argv = ["--pristine", str(tmp_path), "--patched", str(tmp_path), "--out", str(tmp_path / "o" / "e.json")]
    argv += ["--grid", "wide", "--engine-arg", "max_total_tokens=1000000", "--workdir", str(tmp_path / "w")]
    assert engine_ab.main(argv) == 2
    err = capsys.readouterr().err.strip()
    need = sizing.sizing_for(grid.GRIDS["wide"], 48, 4).needed_kv_tokens
    assert len(err.splitlines()) == 1 and f"max_total_tokens >= {need} " in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()


def test_compare_outputs_finds_the_first_divergence():
    a = [{"output_ids": [1, 2, 3, 4]}, {"output_ids": [5, 6]}]
    b = [{"output_ids": [1, 2, 9, 4]}, {"output_ids": [5, 6]}]
    assert compare.compare_outputs(a, b) == (0.5, [{"request": 0, "position": 2}])
    assert compare.first_divergence([1, 2], [1, 2, 3]) == 2
    assert compare.logit_margin([[[-0.1, 5], [-0.4, 6]]], 0) == pytest.approx(0.3)
    assert compare.logit_margin([[[-0.1, 5]]], 0) is None


def test_indexer_share_counts_indexer_kernels_over_all_kernels():
    profile = {
        "steps": [
            {
                "kernels": {
                    "void deep_gemm::sm90_fp8_paged_mqa_logits<2>": [300.0, 4],
                    "topk_transform_decode": [100.0, 4],
                    "nvjet_gemm": [600.0, 30],
                    "paged_mqa_logits_metadata": [5.0, 1],
                }
            },
            {
                "kernels": {
                    "void deep_gemm::sm90_fp8_paged_mqa_logits<2>": [310.0, 4],
                    "topk_transform_decode": [90.0, 4],
                    "nvjet_gemm": [600.0, 30],
                }
            },
        ]
    }
    share = measures.indexer_share(profile)
    assert share["steps"] == 2
    assert share["share"] == pytest.approx((400 / 1005 + 400 / 1000) / 2)
    assert share["indexer_us"]["paged_mqa_logits"] == pytest.approx(305.0)
    assert measures.indexer_share({"steps": []}) is None


def test_case_row_ratios_and_aa_floor():
    case = grid.Case(4, 4096, "uniform", 8)
    runs = {
        "pristine": [_run([2.0] * 6), _run([2.2] * 6)],
        "patched": [_run([1.0] * 6), _run([1.0] * 6)],
    }
    row = rows.case_row(case, 2, runs, {}, skip=2)
    assert row["pristine"]["verify_step_us"] == pytest.approx(2100.0)
    assert row["speedup_verify"] == pytest.approx(2.1)
    assert row["aa_noise"]["verify"] == pytest.approx(2.0 / 2.2)
    assert row["tokens_identical"] == 1.0 and row["divergences"] == []
    assert row["cuda_graph"] is True
    assert row["verify_samples"] == {"pristine": 12, "patched": 12}


def _bench(tmp_path, folder: str, *extra):
    return run_bench(tmp_path, folder, *extra)


def test_driver_end_to_end_against_a_stand_in_engine(tmp_path):
    status, doc = _bench(tmp_path, "run", "--margins")
    assert status == 0, doc["notes"]
    rows = doc["rows"]
    assert [(r["next_n"], r["batch_size"], r["ctx"], r["lengths"]) for r in rows] == [
        (n, *spec) for n in (2, 4) for spec in grid.GRIDS["targets"]
    ]
    for row in rows:
        assert row["speedup_verify"] == pytest.approx(2.0)  # the stand-in's patched tree is twice as fast
        assert row["tokens_identical"] == 1.0
        assert row["aa_noise"]["verify"] == pytest.approx(1.0)
    for row in rows:  # the stand-in's patched draft-extend replays a graph at a quarter of eager's times
        assert row["patched"]["parts"]["draft_extend"]["graph"] == 1.0
        assert row["pristine"]["parts"]["draft_extend"]["graph"] == 0.0
        assert row["speedup_parts"]["draft_extend"] == {"gpu": pytest.approx(4.0), "host": pytest.approx(4.0)}
        assert set(row["speedup_parts"]) == set(measures.STEP_PARTS)
        assert row["aa_noise"]["step_gpu"] == pytest.approx(1.0)
    assert [s["next_n"] for s in doc["seed_cases"]] == [3, 2]
    for seed in doc["seed_cases"]:
        assert seed["step_parts"]["patched"]["draft_extend"]["host_ms"] == pytest.approx(1.5)
        assert seed["tokens_identical"] == 1.0
        assert seed["draft_loops"]["patched"]["seeded"] > 0
    profiled = [r for r in rows if r["batch_size"] * r["ctx"] >= 32 * 16384]
    assert profiled and all(r["indexer_share"]["patched"]["share"] == pytest.approx(0.5) for r in profiled)
    assert all(r["indexer_share"]["patched"] is None for r in rows if r not in profiled)
    # two engines per next_n, three per IndexShare case (its reference for draft positions)
    assert len(doc["engines"]) == 2 * 2 + 2 * 3 and all(e["info"]["stand_in"] for e in doc["engines"])
    # without --same-layout each engine process draws its own hash seed (unless this one was given one)
    for engine in doc["engines"]:
        assert engine["layout"]["hash_seed"] == engine["info"]["layout_seen"]["hash_seed"]
        assert engine["layout"]["hash_seed"] == os.environ.get("PYTHONHASHSEED", "random")
    assert {(r["line"], r["parallel"]) for r in rows} == {("v0.5.14", "tp1")}
    assert any("prefilled" in note for note in doc["notes"])


def test_an_engine_given_a_smaller_kv_pool_than_the_grid_needs_is_named(tmp_path):
    status, doc = _bench(tmp_path, "short-memory", "--next-n", "2", "--seed-case", "")
    assert status == 0
    [note] = [note for note in doc["notes"] if "KV pool" in note]
    asked = doc["meta"]["engine_args"]["max_total_tokens"]
    need = sizing.sizing_for(grid.GRIDS["targets"], 6, 2).needed_kv_tokens
    assert note == (
        f"n2-patched: a KV pool of {asked // 2} tokens, below the {need} the grid needs: "
        "pool prompts may be evicted and prefilled again inside timed runs"
    )


def test_a_seed_case_without_time_left_says_so(tmp_path):
    status, doc = _bench(tmp_path, "late", "--next-n", "", "--deadline-s", "60")
    assert status == 0 and doc["seed_cases"] == []
    for next_n, note in zip((3, 2), doc["notes"], strict=True):
        assert re.fullmatch(
            rf"seed case n{next_n}: not run \((59|60) s left before the deadline, it needs 150 s\)", note
        ), note


def test_an_engine_that_dies_is_named_with_its_exception(tmp_path):
    status, doc = _bench(tmp_path, "crash", "--next-n", "2")
    assert status == 1
    [failure] = [note for note in doc["notes"] if "ended" in note]
    assert failure.startswith("next_n=2: RuntimeError: n2-pristine: the engine process ended (exit ")
    assert failure.endswith(
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered (log: engine-n2-pristine.log)"
    )
    assert [row["batch_size"] for row in doc["rows"]] == [8]  # the case before the fault stays


def test_first_error_needs_a_traceback():
    assert (
        processes.first_error("ValueError: printed, not raised\nTraceback (most recent call last):\n  x\nKeyError: 'k'")
        == "KeyError: 'k'"
    )
    assert processes.first_error("Thread 0x1 (most recent call first):\n  File wait") is None


def test_driver_reports_a_divergence_with_its_margin(tmp_path):
    status, doc = _bench(tmp_path, "diverge", "--margins", "--next-n", "2")
    row = doc["rows"][0]
    assert row["tokens_identical"] < 1.0
    assert row["divergences"][0] == {"request": 0, "position": 3}
    assert row["margins"][0]["pristine_margin"] == pytest.approx(0.25)


def test_parallel_labels_and_engine_args_reach_the_rows(tmp_path):
    assert sizing.parallel_label({}) == "tp1"
    assert sizing.parallel_label({"tp_size": 2}) == "tp2"
    assert sizing.parallel_label({"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}) == "dp2"
    status, doc = _bench(
        tmp_path,
        "dp",
        "--next-n",
        "2",
        "--engine-arg",
        "tp_size=2",
        "--engine-arg",
        "dp_size=2",
        "--engine-arg",
        "enable_dp_attention=true",
    )
    assert doc["meta"]["engine_args"]["tp_size"] == 2 and doc["meta"]["engine_args"]["enable_dp_attention"] is True
    assert {r["parallel"] for r in doc["rows"]} == {"dp2"}


def test_post_import_hook_runs_after_the_module_executes(tmp_path, monkeypatch):
    (tmp_path / "probe_target_mod.py").write_text("class Runner:\n    def forward(self):\n        return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def hook(module):
        seen.append(module.Runner.forward(None))
        module.Runner.forward = lambda self: "wrapped"

    finder = engine_probe_hooks.AfterImport({"probe_target_mod": hook})
    sys.meta_path.insert(0, finder)
    try:
        import probe_target_mod
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("probe_target_mod", None)
    assert seen == ["real"] and probe_target_mod.Runner().forward() == "wrapped"


def test_seed_found_under_either_name_and_a_flag_wins():
    tensor = types.SimpleNamespace(numel=lambda: 4)
    empty = types.SimpleNamespace(numel=lambda: 0)
    assert engine_probe_hooks._seed_present(types.SimpleNamespace(dsa_topk_seed=tensor))
    assert engine_probe_hooks._seed_present(types.SimpleNamespace(dsa_topk_indices=tensor))
    assert not engine_probe_hooks._seed_present(types.SimpleNamespace(dsa_topk_indices=empty))
    assert not engine_probe_hooks._seed_present(
        types.SimpleNamespace(dsa_topk_indices=tensor, has_dsa_topk_indices=False)
    )
    assert not engine_probe_hooks._seed_present(types.SimpleNamespace())
    # the v0.5.14 line's flag is a method of EagleDraftInput
    assert not engine_probe_hooks._seed_present(
        types.SimpleNamespace(dsa_topk_indices=tensor, has_dsa_topk_indices=lambda: False)
    )
    assert engine_probe_hooks._seed_present(
        types.SimpleNamespace(dsa_topk_indices=empty, has_dsa_topk_indices=lambda: True)
    )


def test_report_keeps_every_row_and_names_the_run(tmp_path):
    from bench.engine import report as engine_report

    status, doc = _bench(tmp_path, "report")
    run_file = tmp_path / "report" / "engine.json"
    combined = engine_report.combined(engine_report.load_runs([run_file, run_file]))
    assert len(combined["rows"]) == 2 * len(doc["rows"]) and {r["run"] for r in combined["rows"]} == {"engine.json"}
    text = engine_report.markdown(combined)
    head = text[: text.index("Decode-step parts")]  # the first table
    table = [line for line in head.splitlines() if line.startswith("| engine | v0.5.14 |")]
    assert len(table) == len(combined["rows"])
    assert "2.000" in table[0] and "IndexShare case" in text
    # the decode step's parts: the stand-in's draft-extend runs at a quarter of pristine's times, as a graph
    second = text[text.index("Decode-step parts") : text.index("Draft positions (greedy")]
    parts = [line for line in second.splitlines() if line.startswith("| engine |")]
    assert len(parts) == len(combined["rows"])
    assert all("| 4.00 -> 1.00 | 4.000 |" in line and "| 0.00 -> 1.00 |" in line for line in parts)
    assert "Draft-extend host ms (median / max): pristine 6.00 / 6.00, patched 1.50 / 1.50" in text


def test_report_labels_rows_of_a_run_past_the_version_gate_and_keeps_notes_short(tmp_path):
    from bench.engine import report as engine_report

    _bench(tmp_path, "gate", "--next-n", "2", "--env", "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1")
    run_file = tmp_path / "gate" / "engine.json"
    doc = json.loads(run_file.read_text())
    assert doc["rows"] and all(r["sgl_kernel_version_check_skipped"] for r in doc["rows"])
    # a run written before rows carried the label gets it from the env its meta recorded
    for row in doc["rows"]:
        del row["sgl_kernel_version_check_skipped"]
    doc["notes"].append("next_n=6: RuntimeError: engine ended; last log lines:\nThread 1\nThread 2")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    combined = engine_report.combined(engine_report.load_runs([old]))
    assert all(r["sgl_kernel_version_check_skipped"] for r in combined["rows"])
    text = engine_report.markdown(combined)
    assert "sglang-kernel version gate skipped" in text
    assert "last log lines: [2 more lines in the run's JSON]" in text and "Thread 2" not in text


class _FakeEvent:
    """A CUDA event on CPU: its time is the host clock when recorded, and it is always complete."""

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = len(_FakeEvent.clock)
        _FakeEvent.clock.append(self.at)

    def query(self):
        return True

    def elapsed_time(self, end):
        return float(end.at - self.at)


def _fake_sglang_worker_module():
    """The shape of sglang's eagle_worker_v2 (the methods the probe wraps) and of the draft-extend runner."""
    calls = []
    runner_module = types.SimpleNamespace()

    class EAGLEDraftExtendCudaGraphRunner:
        def execute(self, forward_batch):
            calls.append("replay")
            return "replayed"

    runner_module.EAGLEDraftExtendCudaGraphRunner = EAGLEDraftExtendCudaGraphRunner

    class EagleDraftWorker:
        def draft(self, batch):
            calls.append("draft")

        def _draft_extend_for_decode(self, batch, result):
            calls.append("draft_extend")
            if batch.graph:
                EAGLEDraftExtendCudaGraphRunner().execute(batch)

    class EAGLEWorkerV2:
        def __init__(self):
            self.draft_worker = EagleDraftWorker()

        def verify(self, batch):
            calls.append("verify")

        def forward_batch_generation(self, batch, on_publish=None):
            if not batch.forward_mode.is_extend():
                self.draft_worker.draft(batch)
                self.verify(batch)
            self.draft_worker._draft_extend_for_decode(batch, None)
            return on_publish

    worker_module = types.SimpleNamespace(EagleDraftWorker=EagleDraftWorker, EAGLEWorkerV2=EAGLEWorkerV2)
    return worker_module, runner_module, calls


def _batch(bs, extend=False, graph=False):
    return types.SimpleNamespace(
        seq_lens=types.SimpleNamespace(shape=(bs,)),
        forward_mode=types.SimpleNamespace(is_extend=lambda: extend),
        is_extend_in_batch=extend,
        spec_info=types.SimpleNamespace(),
        graph=graph,
    )


def test_probe_times_each_part_of_a_decode_step(tmp_path, monkeypatch):
    import torch

    _FakeEvent.clock = []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    probe = engine_probe_hooks.Probe(tmp_path)
    monkeypatch.setattr(probe, "start_flusher", lambda device: None)
    monkeypatch.setattr(engine_probe_hooks, "_probe", probe)
    worker_module, runner_module, calls = _fake_sglang_worker_module()
    engine_probe_hooks._hook_eagle_worker(worker_module)
    engine_probe_hooks._hook_draft_extend_runner(runner_module)

    worker = worker_module.EAGLEWorkerV2()
    assert worker.forward_batch_generation(_batch(4, graph=True), on_publish="kept") == "kept"
    worker.forward_batch_generation(_batch(3))
    worker.forward_batch_generation(_batch(2, extend=True))  # a prefill: no step record, no draft-extend one
    assert calls == ["draft", "verify", "draft_extend", "replay", "draft", "verify", "draft_extend", "draft_extend"]

    outs = {name: io.StringIO() for name in (engine_probe_hooks.VERIFY_FILE, engine_probe_hooks.STEPS_FILE)}
    probe.flush_finished(outs)
    records = [json.loads(line) for line in outs[engine_probe_hooks.STEPS_FILE].getvalue().splitlines()]
    assert [(r["part"], r["batch_size"]) for r in records] == [
        ("draft", 4),
        ("verify", 4),
        ("draft_extend", 4),
        ("step", 4),
        ("draft", 3),
        ("verify", 3),
        ("draft_extend", 3),
        ("step", 3),
        ("draft_extend", 2),
    ]
    assert [r["graph"] for r in records if r["part"] == "draft_extend"] == [True, False, False]
    # GPU time between the part's own events; a step's spans its parts' events
    step = records[3]
    assert step["gpu_ms"] == 7.0 and records[0]["gpu_ms"] == 1.0
    assert all(r["host_ms"] >= 0 for r in records)
    # the calling thread's CPU time within the call's wall time, and the vCPU it ran on (this one may)
    assert all(0 <= r["cpu_ms"] <= r["host_ms"] + 1.0 for r in records)
    assert {r["cpu"] for r in records} <= os.sched_getaffinity(0)
    assert outs[engine_probe_hooks.VERIFY_FILE].getvalue() == ""
    assert probe.draft_loops["loops"] == 2


_HOOK_TARGETS = """
import importlib, sys
sys.path[:0] = [sys.argv[1] + "/tests/patched", sys.argv[1] + "/bench/engine_probe"]
import cpu_sglang
cpu_sglang.install()
import engine_probe_hooks
engine_probe_hooks._probe = engine_probe_hooks.Probe(__import__("pathlib").Path(sys.argv[2]))
targets = {
    "sglang.srt.speculative.eagle_worker_v2": {
        "EagleDraftWorker": ["draft", "_draft_extend_for_decode", "_draft_extend_for_prefill"],
        "EAGLEWorkerV2": ["verify", "forward_batch_generation"],
    },
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner": {"EAGLEDraftExtendCudaGraphRunner": ["execute"]},
    "sglang.srt.speculative.eagle_draft_cuda_graph_runner": {"EAGLEDraftCudaGraphRunner": ["capture_one_shape", "execute"]},
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner": {"DecodeCudaGraphRunner": ["capture"]},
    "sglang.srt.model_executor.model_runner": {"ModelRunner": ["forward", "alloc_memory_pool"]},
}
hooks = {
    "sglang.srt.speculative.eagle_worker_v2": engine_probe_hooks._hook_eagle_worker,
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner": engine_probe_hooks._hook_draft_extend_runner,
    "sglang.srt.speculative.eagle_draft_cuda_graph_runner": engine_probe_hooks._hook_draft_runner,
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner": engine_probe_hooks._hook_graph_capture,
    "sglang.srt.model_executor.model_runner": engine_probe_hooks._hook_model_runner,
}
before = {}
for module_name, classes in targets.items():
    module = importlib.import_module(module_name)
    for cls, names in classes.items():
        before.update({(module_name, cls, n): getattr(getattr(module, cls), n) for n in names})
for module_name, hook in hooks.items():
    hook(sys.modules[module_name])
print(sorted(f"{c}.{n}" for (m, c, n), f in before.items() if getattr(getattr(sys.modules[m], c), n) is f))
"""


@pytest.mark.parametrize("line", ["v0.5.14", "v0.5.23"])
def test_probe_wraps_the_methods_sglang_has(tmp_path, line):
    """Each hook finds its method in sglang 0.5.14's and 0.5.23's own classes (a renamed method would go
    untimed or unrecorded, silently)."""
    env = dict(os.environ)
    if line == "v0.5.23":  # `make test` applies every line; tests/patched's harness imports the tree it is given
        env["SGLPATCH_SGLANG_TREE"] = str(REPO / "build" / "sglang-v0.5.23" / "python")
    run = subprocess.run(
        [sys.executable, "-c", _HOOK_TARGETS, str(REPO), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"  # every one of them wrapped


def test_an_aa_call_runs_the_pristine_tree_in_both_engines_and_says_so(tmp_path):
    """--patched naming the pristine tree: two pristine processes and every run of the call in their floor
    (half again the runs a side of a call with a third engine); the JSON and its notes say what ran."""
    status, doc = _bench(tmp_path, "aa", "--patched", str(tmp_path / "pristine"), "--next-n", "2", "--seed-case", "")
    assert status == 0, doc["notes"]
    assert doc["meta"]["patched_is_pristine"] and doc["meta"]["engines"] == ["pristine", "patched"]
    assert any(note.startswith("A/A call: the engine labelled patched runs the pristine tree") for note in doc["notes"])
    assert [row["speedup_verify"] for row in doc["rows"]] == [pytest.approx(1.0)] * len(grid.GRIDS["targets"])


# -- what a user's server gains: accepted drafts, every verify position, a two-process floor ------------
def test_three_engines_with_simulated_acceptance_end_to_end(tmp_path):
    status, doc = _bench(
        tmp_path,
        "three",
        "--two-process-aa",
        "--acceptance",
        "2:2,4:3",
        "--kv-cache",
        "fp8_e4m3",
        "--pin-cpus",
        "--same-layout",
        "--new-tokens",
        "24",
    )
    assert status == 0, doc["notes"]
    assert doc["meta"]["engines"] == ["pristine", "pristine_b", "patched"]
    # one hash seed and no ASLR for every engine process (where the kernel allows it), as recorded
    assert doc["meta"]["same_layout"] and doc["meta"]["env"]["PYTHONHASHSEED"] == "0"
    for engine in doc["engines"]:
        seen = engine["info"]["layout_seen"]
        assert (
            engine["layout"] == {"hash_seed": "0", "aslr": processes.aslr_state(seen["personality"])}
            and seen["hash_seed"] == "0"
        )
    assert doc["meta"]["engine_args"]["dsa_decode_backend"] == "flashmla_kv"
    for row in doc["rows"]:
        assert row["simulated_acceptance"] == {2: 2.0, 4: 3.0}[row["next_n"]]
        assert (row["kv_cache_dtype"], row["layers"]) == ("fp8_e4m3", 4)
        assert row["aa_noise_kind"] == "two processes"
        assert row["aa_noise_processes"]["verify"] == pytest.approx(1.0)
        assert row["aa_noise_tpot"] == pytest.approx(1.0)
        # tokens come from the greedy runs (the simulated ones emit id 100 only), every position compared
        assert row["tokens_identical"] == 1.0 and row["verify_positions_identical"] == 1.0
        assert row["verify_positions"]["positions"] == row["batch_size"] * row["next_n"] * 24
        assert row["verify_positions_two_pristine"]["identical"] == 1.0
        steps = 24 // row["simulated_acceptance"]  # per timed run, two runs per engine
        assert row["verify_samples"] == dict.fromkeys(("pristine", "pristine_b", "patched"), 2 * steps)
        assert row["pristine"]["tokens_per_s"] and row["patched"]["parts"]["step"]["host_gap_ms"] is not None
        assert len(row["patched"]["cpus_runs"]) == 2
        for run, cpus in zip(row["patched"]["host_runs"], row["patched"]["cpus_runs"], strict=True):
            assert run["draft_host_ms"] == 3.0 and run["step_on_cpu_share"] == pytest.approx(0.9)
            assert run["window"][0] < run["window"][1]  # the run's span, for a later reading of the probe's records
            assert run["prompt_s"] >= 0 and run["first_token_s"] == pytest.approx(0.0, abs=0.01)  # outside the steps
            # read from this machine's /proc/stat around the run, over the cores the engine was pinned to
            # (every vCPU where there are too few to pin: this machine's 2 in CI)
            assert run["host_cpus"]["cpus"] == (cpus or run["host_cpus"]["cpus"]) and run["host_cpus"]["ticks"] >= 0
            assert set(run["step_cpus"]) <= set(run["host_cpus"]["cpus"])  # the stand-in names one it may run on
        assert [run["draft_host_ms"] for run in row["host_runs_pristine_b"]] == [3.0, 3.0]  # the floor's process too
        # each ratio of means with its interval: the stand-in's runs do not spread, so the intervals are points
        floor = row["aa_noise_processes"]["step_interval_mean_of_runs_interval"]
        assert floor["runs"] == [2, 2] and floor["ci95"] == [pytest.approx(1.0)] * 2
        assert row["speedup_tpot_mean_of_runs_interval"]["runs"] == [2, 2]
    blocks = [[e["label"] for e in doc["engines"] if e["tag"] == f"n{n}"] for n in (2, 4)]
    assert blocks == [["pristine", "pristine_b", "patched"], ["pristine_b", "patched", "pristine"]]


def test_a_verify_position_that_flips_is_counted_with_its_margins(tmp_path):
    status, doc = _bench(tmp_path, "diverge", "--next-n", "2", "--acceptance", "2:2")
    positions = doc["rows"][0]["verify_positions"]
    assert positions["identical"] < 1.0 and positions["near_ties"] == 1
    # the diverging emitted token (position 0 of request 0) and the stand-in's flipped near-tie after it
    assert positions["differences"] == [
        {"forward": 3, "row": 0, "margins": [1.5, 1.5], "near_tie": False},
        {"forward": 3, "row": 1, "margins": [0.01, 0.01], "near_tie": True},
    ]


def test_run_and_start_orders_and_the_cores_each_engine_gets():
    three = ("pristine", "pristine_b", "patched")
    order = schedule.run_order(three, 6)
    for label in three:  # each engine takes each place in the order twice over six repeats
        assert [order[i::3].count(label) for i in range(3)] == [2, 2, 2]
    assert schedule.run_order(("a", "b"), 3) == ["a", "b", "b", "a", "a", "b"]
    assert [schedule.start_order(three, k)[0] for k in range(4)] == ["pristine", "pristine_b", "patched", "pristine"]
    assert schedule.cpu_groups(list(range(16)), 3) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    assert schedule.cpu_groups([0, 1], 3) is None
    groups = [[0, 1], [2, 3], [4, 5]]
    dealt = [schedule.cores_for_rep(three, groups, rep) for rep in range(3)]
    assert dealt[0] == {"pristine": [0, 1], "pristine_b": [2, 3], "patched": [4, 5]}
    for label in three:  # every engine on every group once in three reps
        assert sorted(d[label] for d in dealt) == groups
    assert engine_ab.parse_acceptance("4:3,6:4.5") == {4: 3.0, 6: 4.5}
    with pytest.raises(ValueError, match="1..next_n"):
        engine_ab.parse_acceptance("4:5")


def test_host_gap_is_the_time_between_step_calls():
    steps = [
        {"t": t, "part": "step", "batch_size": 4, "host_ms": 6.0, "gpu_ms": 7.0} for t in (0.0, 0.010, 0.021, 0.030)
    ]
    assert measures.step_parts([{"steps": steps}], 4, 0)["step"]["host_gap_ms"] == pytest.approx(4.0)
    assert "step" not in measures.step_parts([{"steps": steps}], 8, 0)


def test_probe_applies_a_runs_mode_and_records_every_position(tmp_path, monkeypatch):
    import torch

    spec_utils = types.SimpleNamespace(SIMULATE_ACC_LEN=-1.0)
    monkeypatch.setitem(sys.modules, engine_probe_hooks.SPEC_UTILS, spec_utils)
    probe = engine_probe_hooks.Probe(tmp_path)
    assert probe.apply_mode() == {} and spec_utils.SIMULATE_ACC_LEN == -1.0
    engine_worker.write_mode(tmp_path, {"simulate_acc_len": 3.0})
    assert probe.apply_mode() == {"simulate_acc_len": 3.0} and spec_utils.SIMULATE_ACC_LEN == 3.0
    engine_worker.write_mode(tmp_path, {"record_positions": True})
    probe.apply_mode()
    assert spec_utils.SIMULATE_ACC_LEN == -1.0  # back to what the environment said
    logits = torch.tensor([[0.0, 2.0, 1.5], [3.0, 0.0, 0.0]])
    output = types.SimpleNamespace(logits_output=types.SimpleNamespace(next_token_logits=logits))
    probe.record_positions(output, 1, 5.0)
    [record] = [json.loads(line) for line in (tmp_path / engine_probe_hooks.POSITIONS_FILE).read_text().splitlines()]
    assert record == {"t": 5.0, "batch_size": 1, "argmax": [1, 0], "margin": [0.5, 3.0], "logit_sum": [3.5, 3.0]}


def test_report_shows_what_a_server_sees_beside_the_two_process_floor(tmp_path):
    from bench.engine import report as engine_report

    _bench(tmp_path, "served", "--next-n", "4", "--two-process-aa", "--acceptance", "4:3", "--new-tokens", "24")
    run_file = tmp_path / "served" / "engine.json"
    text = engine_report.markdown(engine_report.combined(engine_report.load_runs([run_file])))
    served = [line for line in text.splitlines() if line.startswith("| engine | v0.5.14 | bfloat16 | 4 | 4 | 3.0 |")]
    assert len(served) == len(grid.GRIDS["targets"])
    assert all(
        " | 1.000 | " in line and line.endswith("| 1.0 | 1.0000 of " + line.split(" of ")[-1]) for line in served
    )
    engine_report.plot(engine_report.combined(engine_report.load_runs([run_file])), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_core_groups_keep_smt_siblings_together(tmp_path):
    # 8 physical cores, two threads each, numbered as Linux usually does: cpu N and N+8 share a core.
    core_of = {cpu: (0, cpu % 8) for cpu in range(16)}
    groups = schedule.cpu_groups(list(range(16)), 3, core_of)
    assert groups == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13]]
    cores = [{core_of[c] for c in g} for g in groups]
    assert not (cores[0] & cores[1]) and not (cores[1] & cores[2])
    for cpu, (package, core) in core_of.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert schedule.physical_cores(list(range(16)), tmp_path) == core_of
    assert schedule.physical_cores([99], tmp_path) == {}
    # one thread per core: the plain split
    assert schedule.cpu_groups(list(range(16)), 3, {c: (0, c) for c in range(16)})[0] == [0, 1, 2, 3, 4]


def test_mean_of_runs_weighs_a_bimodal_host_as_often_as_it_came():
    def run(tpot):
        return {"outputs": [{"tpot_ms": tpot}, {"tpot_ms": tpot}]}

    pristine = [run(3.0), run(3.0), run(4.0), run(4.0), run(4.0)]
    patched = [run(3.0), run(3.0), run(3.0), run(4.0), run(4.0)]
    assert measures.tpot_ms(pristine) == 4.0 and measures.tpot_ms(patched) == 3.0
    assert measures.tpot_ms_per_run(pristine) == [3.0, 3.0, 4.0, 4.0, 4.0]
    assert measures.mean_tpot_ms(pristine) == pytest.approx(3.6)
    assert measures.mean_tpot_ms(patched) == pytest.approx(3.4)
    assert measures.mean_tpot_ms([]) is None
    # a run without a TPOT keeps its place beside the run's cores, and the mean leaves it out
    assert measures.tpot_ms_per_run([run(3.0), {"outputs": []}, run(4.0)]) == [3.0, None, 4.0]
    assert measures.mean_tpot_ms([run(3.0), {"outputs": []}, run(4.0)]) == pytest.approx(3.5)


def test_an_engine_is_moved_to_other_cores_with_its_children():
    grandchild = "import time; time.sleep(30)"
    child = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"]
    )
    try:
        deadline = time.time() + 10
        while len(processes.process_tree(child.pid)) < 2 and time.time() < deadline:
            time.sleep(0.05)
        tree = processes.process_tree(child.pid)
        assert tree[0] == child.pid and len(tree) == 2
        cpus = sorted(os.sched_getaffinity(0))[:1]
        engine = processes.EngineProcess.__new__(processes.EngineProcess)
        engine.proc = child
        engine.pin(cpus)
        assert engine.pinned == cpus
        assert all(sorted(os.sched_getaffinity(pid)) == cpus for pid in tree)
    finally:
        for pid in processes.process_tree(child.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child.wait()


def test_timed_runs_stop_at_a_whole_round_where_the_deadline_leaves_too_little(tmp_path, monkeypatch):
    """Many short runs (a floor's precision counts runs): where the deadline comes first, the runs stop
    before a round, so every engine has as many, with two rounds' time left for what follows."""
    from bench.engine import driver

    clock = types.SimpleNamespace(t=1000.0)
    monkeypatch.setattr(driver, "time", types.SimpleNamespace(time=lambda: clock.t, strftime=time.strftime))
    monkeypatch.setattr(driver, "RESERVE_AFTER_RUNS_S", 5.0)

    class Engine:
        cpus, pinned = None, None

        def call(self, command):
            clock.t += 1.0  # each timed run takes a second of the fake clock
            return {"outputs": [], "steps": []}

    pair = {label: Engine() for label in ("pristine", "pristine_b", "patched")}
    args = types.SimpleNamespace(reps=50)
    bench = driver.Bench(args, {}, None, {}, {}, tuple(pair), tmp_path, deadline=clock.t + 20.0)
    case = grid.Case(32, 65536, "uniform", 48)
    runs = bench.timed_runs(pair, case, {})
    # rounds of 3 s, and 2 x 3 + 5 s needed before each: 11 s are left before the fourth, 8 before the fifth
    assert {label: len(r) for label, r in runs.items()} == {"pristine": 4, "pristine_b": 4, "patched": 4}
    assert bench.notes == [f"{case.name}: timed runs stopped after 4 of 50 rounds (deadline)"]


def test_a_ratio_of_means_comes_with_its_interval_and_the_runs_that_would_pin_it():
    from bench.engine import precision

    # two engines of one speed, each run's host drawn with a spread of about 0.14 of the mean
    a = [1.0, 1.2, 0.85, 1.1, 0.9, 0.95, 1.15, 0.8]
    b = [0.9, 1.1, 1.0, 1.25, 0.82, 1.05, 0.88, 1.0]
    found = precision.ratio_interval(a, b)
    assert found["ratio"] == pytest.approx(sum(a) / sum(b))
    low, high = found["ci95"]
    assert low < 1.0 < high and high / low > 1.2  # eight runs a side: far from +-3%
    assert found["runs"] == [8, 8]
    # about 2 x (1.96 x 0.14 / 0.03)^2 runs a side would bring it to +-3%
    assert 130 <= found["runs_for_3pct"] <= 190
    many = precision.ratio_interval(a * 20, b * 20)  # 160 runs a side at the same spread
    assert many["ci95"][1] / many["ci95"][0] < 1.07
    assert precision.ratio_interval([1.0], b) is None and precision.ratio_interval([1.0, None], b) is None
    assert precision.t_975(2) == 4.303 and precision.t_975(11) == 2.228 and precision.t_975(500) == 1.96
