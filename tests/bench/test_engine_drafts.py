"""Every draft token compared, each engine's memory, and the step gaps' tail (issue 47), on a CPU.

- the driver against the stand-in engine: every draft position of every request of the greedy runs,
  patched against pristine and between the two pristine processes, and the IndexShare case against
  the patched tree's own eager draft-extend; memory per engine in every row;
- the two mutations the draft comparison is for, which leave the output tokens and the target's
  verdict as they were: a draft-extend replay with stale lengths, a seed from the wrong row;
- the comparison on hand-made records (batches that merged at other moments, a near-tie);
- the probe's draft hooks on classes shaped like sglang's: the draft loop's graph read through the
  logits its capture kept, its eager loop, draft-extend replayed and eager.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from engine_runs import run_bench  # this folder, as pytest puts it on the path

from bench.engine import compare, measures, report, rows

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "engine_probe"))

import engine_probe_hooks  # noqa: E402


def _draft_positions(bs, next_n, steps):
    """Per request: its first draft's position 0, then per step a draft-extend's and a loop's."""
    return bs * (1 + steps * (next_n - 1))


def test_every_draft_position_is_compared_and_each_engines_memory_is_in_its_row(tmp_path):
    extra = ["--two-process-aa", "--acceptance", "2:2,4:3", "--new-tokens", "24", "--kv-cache", "fp8_e4m3"]
    status, doc = run_bench(tmp_path, "three", *extra)
    assert status == 0, doc["notes"]
    for row in doc["rows"]:
        drafts = row["draft_positions"]
        assert row["draft_positions_identical"] == 1.0 and row["draft_positions_two_pristine"]["identical"] == 1.0
        assert drafts["positions"] == _draft_positions(row["batch_size"], row["next_n"], 24)
        assert drafts["unmatched_steps"] == 0 and drafts["differences"] == []
        kinds = {"prefill_extend", "extend", "loop"} if row["next_n"] > 2 else {"prefill_extend", "extend"}
        assert set(drafts["by_kind"]) == kinds
        memory = row["mem_gb"]
        assert set(memory) == {"pristine", "pristine_b", "patched"}
        assert memory["patched"]["probe"]["graphs_total"] == pytest.approx(0.7 + 0.36 + 0.64)
        assert memory["pristine"]["probe"]["graphs_total"] == pytest.approx(0.7 + 0.36)
        assert memory["patched"]["kv_pool"] > 0 and memory["patched"]["token_capacity"] > 0
        # the step gaps' tail and tokens/s over one wall time for every run, with the two-process floor
        assert set(row["patched"]["step_interval_ms_percentiles"]) == {"p10", "p50", "p90", "p99"}
        assert row["window_s"] > 0 and row["speedup_tokens_per_s_window"] == pytest.approx(1.0)
        assert row["aa_noise_processes"]["tokens_per_s_window"] == pytest.approx(1.0)
        assert row["aa_noise_processes"]["tokens_per_s_window_mean_of_runs_interval"]["ratio"] == pytest.approx(1.0)
        assert len(row["patched"]["tokens_per_s_window_runs"]) == len(row["patched"]["tpot_ms_runs"])
    for seed in doc["seed_cases"]:
        assert seed["draft_positions_identical"] == 1.0 and seed["draft_reference"].startswith("patched_eager")
        assert set(seed["mem_gb"]) == {"pristine", "patched", "patched_eager"}
    assert doc["meta"]["memory_plan"]["fits"] is None  # no GPU here to size against
    # the report's table of them, one line a row
    text = report.markdown(report.combined(report.load_runs([tmp_path / "three" / "engine.json"])))
    start = text.index("Draft positions (greedy runs")
    lines = [line for line in text[start:].splitlines() if line.startswith("| engine |")]
    assert len(lines) == len(doc["rows"])
    n4 = next(r for r in doc["rows"] if r["next_n"] == 4)
    assert f"| 1.0000 of {n4['draft_positions']['positions']} (0) | 1.0000 of " in lines[doc["rows"].index(n4)]
    assert "| 1.06 / 1.06 | 1.06 / 1.70 |" not in text and "| 0.70 / 1.06 | 0.70 / 1.70 |" in lines[0]
    assert "Draft positions identical to the patched tree's eager draft-extend: 1.0000 of " in text


def test_a_draft_extend_replay_with_stale_lengths_is_caught(tmp_path):
    status, doc = run_bench(tmp_path, "stale-lengths", "--next-n", "3", "--seed-case", "3", "--two-process-aa")
    assert status == 0, doc["notes"]
    for row in doc["rows"]:
        # the target's verdict and the output tokens do not show it: greedy verification corrects drafts
        assert row["tokens_identical"] == 1.0 and row["verify_positions_identical"] == 1.0
        drafts = row["draft_positions"]
        assert drafts["identical"] < 1.0 and drafts["near_ties"] == 0
        assert drafts["by_kind"]["extend"]["different"] > 0 and drafts["by_kind"]["loop"]["different"] > 0
        assert drafts["by_kind"]["prefill_extend"]["different"] == 0
        assert {d["kind"] for d in drafts["differences"]} <= {"extend", "loop"}
        assert row["draft_positions_two_pristine"]["identical"] == 1.0
    seed = doc["seed_cases"][0]
    assert seed["tokens_identical"] == 1.0 and seed["draft_positions_identical"] < 1.0


def test_a_seed_taken_from_the_wrong_row_is_caught(tmp_path):
    status, doc = run_bench(tmp_path, "wrong-seed-row", "--next-n", "3", "--seed-case", "3")
    assert status == 0, doc["notes"]
    assert all(row["draft_positions_identical"] == 1.0 for row in doc["rows"])  # no IndexShare: no seed
    seed = doc["seed_cases"][0]
    assert seed["tokens_identical"] == 1.0
    drafts = seed["draft_positions"]
    assert drafts["identical"] < 1.0
    assert drafts["by_kind"]["loop"]["different"] > 0 and drafts["by_kind"]["extend"]["different"] == 0
    assert {d["draft_position"] for d in drafts["differences"]} == {1}


def _record(kind, t, rids, argmax, margin=1.5):
    return {"t": t, "kind": kind, "rids": rids, "argmax": argmax, "margin": [[margin] * len(a) for a in argmax]}


def test_draft_steps_are_matched_request_by_request_whatever_the_batches():
    # one engine ran requests 0 and 1 together; the other ran them apart, in another order
    together = {
        "draft_positions": [
            _record("extend", 1.0, ["r1.0", "r1.1"], [[5], [6]]),
            _record("loop", 1.1, ["r1.0", "r1.1"], [[7, 8], [9, 10]]),
            _record("extend", 2.0, ["r1.0", "r1.1"], [[11], [12]]),
        ]
    }
    apart = {
        "draft_positions": [
            _record("extend", 1.0, ["r3.1"], [[6]]),
            _record("extend", 1.2, ["r3.0"], [[5]]),
            _record("loop", 1.3, ["r3.1", "r3.0"], [[9, 10], [7, 8]]),
            _record("extend", 2.0, ["r3.0", "r3.1"], [[11], [12]]),
            _record("extend", 2.1, ["arm3.0"], [[99]]),  # the arming request: not one of the run's
        ]
    }
    result = compare.compare_draft_positions(together, apart)
    assert (result["positions"], result["identical"], result["unmatched_steps"]) == (8, 1.0, 0)
    # a flip where the draft model was nearly undecided is a near-tie; a step one run lacks is unmatched
    apart["draft_positions"][-2] = _record("extend", 2.0, ["r3.0", "r3.1"], [[11], [13]], margin=0.01)
    apart["draft_positions"].append(_record("extend", 3.0, ["r3.0"], [[14]]))
    result = compare.compare_draft_positions(together, apart)
    assert result["near_ties"] == 1 and result["unmatched_steps"] == 1
    assert result["differences"] == [
        {"kind": "extend", "request": 1, "step": 1, "draft_position": 0, "margins": [1.5, 0.01], "near_tie": True}
    ]


def test_step_gap_percentiles_and_tokens_per_s_over_one_wall_time():
    verify = [{"t": t, "batch_size": 2} for t in (0.0, 0.010, 0.020, 0.030, 0.050)]
    tail = measures.step_interval_percentiles([{"verify": verify}], 2, 0)
    assert tail["p50"] == pytest.approx(10.0) and tail["p99"] > tail["p90"] >= tail["p50"] >= tail["p10"]
    assert measures.step_interval_percentiles([{"verify": verify[:2]}], 2, 0) is None
    # two requests decoding together from 0.5 s (each one's second chunk) to 1.5 s (the first one's last)
    fast = {
        "outputs": [
            {"chunks": [[0.0, 1], [0.5, 6], [1.0, 11], [2.0, 21]]},
            {"chunks": [[0.1, 1], [0.5, 6], [1.0, 11], [1.5, 16]]},
        ]
    }
    slow = {"outputs": [{"chunks": [[0.0, 1], [1.0, 6], [3.0, 16]]}]}
    assert measures.streaming_span(fast) == (0.5, 1.5) and measures.streaming_span(slow) == (1.0, 3.0)
    assert rows.fixed_window_s({"a": [fast], "b": [slow]}) == pytest.approx(1.0)
    assert measures.streaming_span({"outputs": [{"chunks": [[0.0, 1]]}]}) is None
    # one second from there: 10 tokens each in the fast run, 5 in the slow one (half of the 10 it streams
    # over the two seconds to its next chunk); the median over runs
    assert measures.tokens_per_s_window([fast], 1.0) == pytest.approx(20.0)
    assert measures.tokens_per_s_window_runs([fast, slow], 1.0) == pytest.approx([20.0, 5.0])
    assert measures.tokens_per_s_window([fast, slow], 1.0) == pytest.approx(12.5)


def test_one_run_streamed_late_sets_no_window_for_the_others():
    """One request whose second chunk reached the client just before the others' last made that run's span 9 ms
    in an H100 call (results/engine_h100_floor64k_aa_random_layout.json), and with it every run's window: the
    window is now the shortest span of those at least half the median, the short run has no rate and is counted."""
    every = 0.017
    runs = {
        "a": [_streamed([0.0, 0.05], decode_from=0.07, every=every) for _ in range(3)],
        "b": [_streamed([0.0, 0.05], decode_from=0.07, every=every) for _ in range(2)],
    }
    late = _streamed([0.0, 0.05], decode_from=0.07, every=every)
    late["outputs"][1]["chunks"] = [
        [0.05, 1],
        [0.07 + 14.5 * every, 4],
        [0.07 + 15 * every, 46],
        [0.07 + 16 * every, 49],
    ]
    runs["b"].append(late)
    window = rows.fixed_window_s(runs)
    assert window == pytest.approx(15 * every)
    assert measures.tokens_per_s_window_runs(runs["b"], window)[-1] is None
    assert rows.window_short_runs(runs, window) == {"a": 0, "b": 1}
    assert rows.window_short_runs(runs, None) is None
    assert measures.tokens_per_s_window(runs["b"], window) == pytest.approx(2 * 3 / every)


def _streamed(first_tokens: list[float], decode_from: float, every: float, steps: int = 16) -> dict:
    """One run's requests: each its first token (the prefill's) when given, then 3 tokens a decode step, every
    request in every step, from ``decode_from`` every ``every`` seconds."""
    return {
        "outputs": [
            {"chunks": [[first, 1]] + [[decode_from + k * every, 1 + 3 * (k + 1)] for k in range(steps)]}
            for first in first_tokens
        ]
    }


def test_tokens_per_s_window_counts_the_decode_and_no_whole_steps():
    """At 32 x 64k (results/engine_h200_floor64k_same_layout.json) the window was 0.25 s from a run's earliest
    first token, which came 0.11-0.20 s before the batch's first decode step: the rate counted mostly how long
    the other requests' prefill took, in whole steps of 96 tokens, and two processes of the same code gave 1.30.
    Two runs of one decode cadence whose prefills end 0.1 s apart, and windows of no whole number of steps, give
    the cadence's rate."""
    every = 0.017
    late = _streamed([0.0, 0.15], decode_from=0.17, every=every)
    early = _streamed([0.0, 0.05], decode_from=0.07, every=every)
    window = rows.fixed_window_s({"a": [late], "b": [early]})
    assert window == pytest.approx(15 * every)
    cadence = 2 * 3 / every
    for w in (window, 0.1, 0.05):
        assert measures.tokens_per_s_window([late], w) == pytest.approx(cadence)
        assert measures.tokens_per_s_window([early], w) == pytest.approx(cadence)


# -- the probe's draft hooks, on classes shaped like sglang's --------------------------------------------
class _FakeEvent:
    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return 0.0


def _logits(torch, rows, winners, margin=1.0):
    """[rows, 8] logits whose argmax is ``winners[row]``, top-1 over top-2 by ``margin``."""
    out = torch.zeros((rows, 8))
    for row, token in enumerate(winners):
        out[row, token] = 2.0 + margin
        out[row, (token + 1) % 8] = 2.0
    return out


def _fake_sglang(torch, capturing):
    """ModelRunner (the draft model's forward), the draft loop's graph runner, the draft-extend graph
    runner and the draft worker, as sglang 0.5.14 and 0.5.23 call one another; a 'graph' replays by
    writing new values into the tensors its capture produced."""

    class ModelRunner:
        is_draft_worker = True

        def forward(self, forward_batch):
            return types.SimpleNamespace(
                logits_output=types.SimpleNamespace(next_token_logits=forward_batch.logits.clone())
            )

    runner = ModelRunner()

    class EAGLEDraftCudaGraphRunner:
        def __init__(self):
            self.static = {}

        def capture_one_shape(self, size, forward):
            forward(size, [0] * size)  # a warm-up
            capturing[0] = True
            self.static[size] = forward(size, [0] * size)
            capturing[0] = False

        def execute(self, batch):
            self.raw_bs, self.bs = len(batch.reqs), min(s for s in self.static if s >= len(batch.reqs))
            for static, winners in zip(self.static[self.bs], batch.loop_winners, strict=True):
                static.copy_(_logits(torch, self.bs, winners + [0] * (self.bs - len(winners))))
            return "tokens"

    class EAGLEDraftExtendCudaGraphRunner:
        def execute(self, forward_batch):
            return types.SimpleNamespace(next_token_logits=forward_batch.logits.clone())

        def can_run_graph(self, forward_batch):
            return True

    graph, extend_graph = EAGLEDraftCudaGraphRunner(), EAGLEDraftExtendCudaGraphRunner()

    def loop_forwards(size, winners_per_step):
        return [
            runner.forward(types.SimpleNamespace(logits=_logits(torch, size, w))).logits_output.next_token_logits
            for w in winners_per_step
        ]

    class EagleDraftWorker:
        def draft(self, batch):
            if batch.graph:
                return graph.execute(batch)
            loop_forwards(len(batch.reqs), batch.loop_winners)

        def _draft_extend_for_decode(self, batch, result):
            forward_batch = types.SimpleNamespace(logits=_logits(torch, 2 * len(batch.reqs), batch.extend_winners))
            if batch.graph:
                output = extend_graph.execute(forward_batch)
            else:
                output = runner.forward(forward_batch).logits_output
            output.next_token_logits = output.next_token_logits[batch.select]  # each request's last accepted row

    modules = {
        "model_runner": types.SimpleNamespace(ModelRunner=ModelRunner),
        "draft_runner": types.SimpleNamespace(EAGLEDraftCudaGraphRunner=EAGLEDraftCudaGraphRunner),
        "extend_runner": types.SimpleNamespace(EAGLEDraftExtendCudaGraphRunner=EAGLEDraftExtendCudaGraphRunner),
        "worker": types.SimpleNamespace(EagleDraftWorker=EagleDraftWorker),
    }

    def start():
        """What the engine's start does once sglang's modules are loaded: capture the loop's graph for 4."""
        graph.capture_one_shape(4, lambda size, _: loop_forwards(size, [[0] * size, [0] * size]))

    return modules, start


def _batch(torch, rids, graph, loop_winners=(), extend_winners=(), select=()):
    return types.SimpleNamespace(
        reqs=[types.SimpleNamespace(rid=rid) for rid in rids],
        seq_lens=types.SimpleNamespace(shape=(len(rids),)),
        forward_mode=types.SimpleNamespace(is_extend=lambda: False),
        is_extend_in_batch=False,
        spec_info=types.SimpleNamespace(),
        graph=graph,
        loop_winners=list(loop_winners),
        extend_winners=list(extend_winners),
        select=torch.tensor(list(select), dtype=torch.long),
    )


def test_probe_records_draft_positions_from_replayed_graphs_and_eager_passes(tmp_path, monkeypatch):
    import torch

    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    probe = engine_probe_hooks.Probe(tmp_path)
    monkeypatch.setattr(probe, "start_flusher", lambda device: None)
    monkeypatch.setattr(engine_probe_hooks, "_probe", probe)
    modules, start = _fake_sglang(torch, capturing)
    # the hooks go in as sglang's modules load, before the engine captures its graphs
    engine_probe_hooks._hook_model_runner(modules["model_runner"])
    engine_probe_hooks._hook_draft_runner(modules["draft_runner"])
    engine_probe_hooks._hook_draft_extend_runner(modules["extend_runner"])
    engine_probe_hooks._hook_eagle_worker(modules["worker"])
    start()
    worker = modules["worker"].EagleDraftWorker()
    probe.mode = {"record_positions": True}
    # three requests: the graph captured for 4 replays them; its second step's argmax differs per request
    worker.draft(_batch(torch, ["r1.0", "r1.1", "r1.2"], True, loop_winners=[[1, 2, 3], [4, 5, 6]]))
    worker.draft(_batch(torch, ["r1.0", "r1.1"], False, loop_winners=[[7, 7], [3, 2]]))
    # draft-extend: two rows a request, the second accepted for request 0, the first for request 1
    worker._draft_extend_for_decode(
        _batch(torch, ["r1.0", "r1.1"], True, extend_winners=[1, 2, 3, 4], select=[1, 2]), None
    )
    worker._draft_extend_for_decode(
        _batch(torch, ["r1.0", "r1.1"], False, extend_winners=[5, 6, 7, 0], select=[0, 3]), None
    )
    probe.mode = {}
    worker.draft(_batch(torch, ["r1.0"], True, loop_winners=[[1], [1]]))  # not a recorded run: nothing written
    records = [
        json.loads(line) for line in (tmp_path / engine_probe_hooks.DRAFT_POSITIONS_FILE).read_text().splitlines()
    ]
    assert [(r["kind"], r["rids"], r["argmax"]) for r in records] == [
        ("loop", ["r1.0", "r1.1", "r1.2"], [[1, 4], [2, 5], [3, 6]]),
        ("loop", ["r1.0", "r1.1"], [[7, 3], [7, 2]]),
        ("extend", ["r1.0", "r1.1"], [[2], [3]]),
        ("extend", ["r1.0", "r1.1"], [[5], [0]]),
    ]
    assert all(m == 1.0 for r in records for row in r["margin"] for m in row)


def test_the_reference_engine_runs_every_draft_extend_eagerly(monkeypatch):
    runner_class = type("EAGLEDraftExtendCudaGraphRunner", (), {"execute": lambda self, fb: fb})
    runner_class.can_run_graph = lambda self, forward_batch: True
    monkeypatch.setenv(engine_probe_hooks.EAGER_DRAFT_EXTEND, "1")
    engine_probe_hooks._hook_draft_extend_runner(types.SimpleNamespace(EAGLEDraftExtendCudaGraphRunner=runner_class))
    assert runner_class().can_run_graph(None) is False


def test_a_draft_record_that_fails_is_written_as_an_error_never_raised(tmp_path):
    probe = engine_probe_hooks.Probe(tmp_path)
    batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(rid="r1.0")])
    probe.record_draft("loop", batch, lambda: 1 / 0)
    [line] = (tmp_path / engine_probe_hooks.DRAFT_POSITIONS_FILE).read_text().splitlines()
    record = json.loads(line)
    assert (record["kind"], record["rids"], record["error"]) == (
        "error",
        [],
        "loop: ZeroDivisionError: division by zero",
    )
    good = {"draft_positions": [_record("extend", 1.0, ["r1.0"], [[3]])]}
    compared = compare.compare_draft_positions(good, {"draft_positions": [*good["draft_positions"], record]})
    assert compared["identical"] == 1.0 and compared["record_errors"] == [record["error"]]
