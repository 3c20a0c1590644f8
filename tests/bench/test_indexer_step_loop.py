"""bench/indexer_step.py's case loop on a CPU, with a stand-in for the GPU side.

The real run needs a CUDA device (DeepGEMM, sgl-kernel, CUDA graphs). This drives its own loop
(grids, eager and graph variants, the per-token / chosen comparison, the comparison's self-check,
the pristine dump and compare, the JSON) with a fixture whose "kernel" is plain torch: logits a
fixed function of (token, key), top-k the largest per row, returned as KV slots of the fixture's
own page layout (fixture.fixture_slots, as the real fixture lays them out and as sgl-kernel's
fused PAGED top-k returns them). A CUDA graph stands in as a recorded call replayed in place.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from bench import indexer_step
from bench.indexer import case, fixture, trees

TOPK = fixture.INDEX_TOPK


class FakeBackend:
    def __init__(self, layout):
        self.layout = layout
        self.forward_metadata = None

    def _meta(self, fb):
        width = -(-max(fb.lengths) // fixture.PAGE)
        table = torch.zeros((len(fb.lengths) * fb.next_n, width), dtype=torch.int32)
        # what a captured graph reads: the metadata buffers, refreshed in place at replay
        self.forward_metadata = types.SimpleNamespace(
            paged_mqa_layout=self.layout, real_page_table=table, lengths=list(fb.lengths), next_n=fb.next_n
        )

    def init_forward_metadata(self, fb):
        self._meta(fb)

    def init_forward_metadata_out_graph(self, fb, in_capture=False):
        self._meta(fb)


class FakeFixture:
    """What run() and run_case() use of bench/indexer/fixture.py's Fixture."""

    def __init__(
        self, max_bs, max_ctx, next_ns, device, calls, seed=fixture.FIXTURE_SEED, chosen=None, tree=None, pages="random"
    ):
        self.torch, self.device, self.calls = torch, device, calls
        self.max_ctx = max_ctx
        # the real fixture's page layout: its KV slots depend on its size, seed and --pages
        self.slots = fixture.fixture_slots(torch, max_bs, max_ctx, seed, pages)
        self.entry_pos = torch.full((int(self.slots.max()) + 1,), -1, dtype=torch.int64)
        self.entry_pos[self.slots.reshape(-1)] = torch.arange(max_ctx).repeat(max_bs)
        chosen = chosen or {2: "native", 3: "per_token", 4: "paired"}
        self.backends = {}
        for n in next_ns:
            self.backends[(n, True)] = FakeBackend("per_token")
            self.backends[(n, False)] = FakeBackend(chosen[n])

    def queries(self, n_tokens, seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.randn((n_tokens, 4), generator=gen), torch.ones((n_tokens, 1))

    def forward_batch(self, lengths, next_n):
        return types.SimpleNamespace(lengths=list(lengths), next_n=next_n, seq_lens=torch.tensor(lengths))

    def step(self, backend, fb, q, w):
        meta = backend.forward_metadata  # not fb: a replayed graph sees the refreshed metadata
        n, lengths = meta.next_n, meta.lengths
        width = self.max_ctx  # a captured block table is as wide as the pool
        keys = torch.arange(width, dtype=torch.float32)
        logits = torch.sin(q[:, :1] * 7.0 + keys[None, :] * 0.37) * q[:, 1:2]
        valid = torch.tensor([length - n + 1 + j for length in lengths for j in range(n)])
        masked = logits.masked_fill(keys[None, :] >= valid[:, None], float("-inf"))
        top = masked.topk(min(TOPK, width), dim=-1)
        request = torch.arange(len(valid)) // n
        slots = self.slots[request[:, None], top.indices]  # positions -> the request's KV slots
        out = torch.full((len(valid), TOPK), -1, dtype=torch.int32)
        out[:, : top.indices.shape[1]] = torch.where(top.values > float("-inf"), slots, -1).to(torch.int32)
        raw = logits
        tokens = 2 if backend.layout != "per_token" else 1
        self.calls.logits_calls.append(
            dict(q=[raw.shape[0] // tokens, tokens, 64, 128], ctx=[raw.shape[0] // tokens, tokens])
        )
        buf = getattr(backend, "logits", None)  # DeepGEMM's output: the graph's static buffer
        if buf is None or buf.shape != raw.shape:
            backend.logits = buf = raw.clone()
        buf.copy_(raw)
        self.calls.last_logits = buf
        return out


class ReplayedCall:
    """A 'CUDA graph': the call once at capture, again in place at every replay."""

    def __init__(self, torch_, fn):
        self.fn = fn
        self.out = fn()

    def replay(self):
        self.out.copy_(self.fn())


@pytest.fixture
def cpu_bench(monkeypatch):
    monkeypatch.setitem(
        indexer_step.GRIDS, "cpu", dict(next_ns=(2, 3), batch_sizes=(2, 3), ctxs=(4096,), lengths=("ragged",))
    )
    monkeypatch.setattr(indexer_step, "Fixture", FakeFixture)
    monkeypatch.setattr(case, "CapturedStep", ReplayedCall)
    monkeypatch.setattr(indexer_step, "select_tree", lambda tree: None)
    monkeypatch.setattr(trees, "for_tree", lambda tree: trees.Tree("0.5.14"))
    monkeypatch.setattr(indexer_step.Calls, "install", lambda self, names=None: None)
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(__version__="0.5.14"))


def bench(tmp_path, *extra):
    return indexer_step.main(["--tree", str(tmp_path), "--grid", "cpu", "--device", "cpu", *extra])


def test_rows_compare_chosen_with_per_token_in_both_modes(cpu_bench, tmp_path):
    out = tmp_path / "run.json"
    assert bench(tmp_path, "--json", str(out), "--dump-topk", str(tmp_path / "dump")) == 0
    doc = json.loads(out.read_text())
    assert doc["partial"] is False and doc["modes"] == "both" and doc["fixture"] == dict(max_bs=3, max_ctx=4096)
    assert doc["comparison_self_check"]["detected"] is True
    rows = doc["rows"]
    assert len(rows) == 2 * 2 * 2  # next_n x B x (eager, graph)
    for r in rows:
        assert r["topk_identical"] and r["topk_equivalent"] and r["logits_bit_identical"] is True, r
        assert r["layout"] == {2: "native", 3: "per_token"}[r["next_n"]] and r["per_token_layout"] == "per_token"
        assert r["grids"] == ["cpu"] and r["speedup"] is None  # no CUDA: not timed
        assert r["kernel_q_chosen"][1] == {2: 2, 3: 1}[r["next_n"]] and r["kernel_q_per_token"][1] == 1
    graph = [r for r in rows if r["cuda_graph"]]
    assert all(r["block_table_width"] == 4096 and r["graph_vs_eager_per_token"]["mismatch_rows"] == 0 for r in graph)
    names = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert names[0] == "fixture.json" and names[1] == "n2_b2_c4096_ragged.pt"
    assert json.loads((tmp_path / "dump" / "fixture.json").read_text())["max_bs"] == 3


def test_a_graph_only_run_compares_with_the_pristine_dumps(cpu_bench, tmp_path):
    assert bench(tmp_path, "--label", "pristine", "--modes", "graph", "--dump-topk", str(tmp_path / "dump")) == 0
    out = tmp_path / "run.json"
    assert bench(tmp_path, "--modes", "graph", "--json", str(out), "--compare-topk", str(tmp_path / "dump")) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 4 and all(r["cuda_graph"] for r in rows)
    assert all(r["compared_with"] == ["per_token", "chosen", "pristine"] for r in rows)
    assert all(r["mismatch_rows"] == dict(chosen=0, pristine=0) for r in rows)


def test_a_dump_of_another_fixture_is_refused_before_anything_runs(cpu_bench, tmp_path, monkeypatch, capsys):
    # The H200 run's pristine part (grid identity) dumped top-k taken on a 48 x 8192 fixture and the
    # patched part (grids holdout,odd) compared them on its 128 x 131072 one: other KV slots, so
    # every row of every compared case mismatched. A dump of another fixture is refused now.
    monkeypatch.setitem(
        indexer_step.GRIDS, "cpu-small", dict(next_ns=(2,), batch_sizes=(2,), ctxs=(4096,), lengths=("ragged",))
    )
    dump = tmp_path / "dump"
    assert (
        bench(tmp_path, "--grid", "cpu-small", "--label", "pristine", "--modes", "graph", "--dump-topk", str(dump)) == 0
    )
    capsys.readouterr()
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as stop:
        bench(tmp_path, "--modes", "graph", "--json", str(out), "--compare-topk", str(dump))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fixture of 2 x 4096" in err[0] and "this run's is 3 x 4096" in err[0], err
    assert not out.exists()


def test_contiguous_pages_lay_each_request_in_one_run_of_the_same_pages():
    random_slots = fixture.fixture_slots(torch, 4, 1024, fixture.FIXTURE_SEED)
    contiguous = fixture.fixture_slots(torch, 4, 1024, fixture.FIXTURE_SEED, "contiguous")
    assert torch.equal(contiguous.reshape(-1), torch.arange(fixture.PAGE, fixture.PAGE * (1 + 4 * 1024 // 64)))
    assert torch.equal(random_slots.reshape(-1).sort().values, contiguous.reshape(-1))  # page 0 unused by both
    pages = random_slots[:, :: fixture.PAGE] // fixture.PAGE  # each request's pages, in position order
    assert torch.equal(random_slots % fixture.PAGE, contiguous % fixture.PAGE)  # whole pages
    assert not all(torch.equal(p.diff(), torch.ones(15, dtype=p.dtype)) for p in pages)
    with pytest.raises(ValueError, match="pages is one of"):
        fixture.fixture_slots(torch, 4, 1024, fixture.FIXTURE_SEED, "sideways")


def test_contiguous_pages_are_recorded_and_a_dump_of_the_other_layout_is_refused(cpu_bench, tmp_path, capsys):
    dump, out = tmp_path / "dump", tmp_path / "run.json"
    contiguous = ["--modes", "graph", "--pages", "contiguous"]
    assert bench(tmp_path, *contiguous, "--label", "pristine", "--dump-topk", str(dump)) == 0
    assert json.loads((dump / "fixture.json").read_text())["pages"] == "contiguous"
    assert bench(tmp_path, *contiguous, "--json", str(out), "--compare-topk", str(dump)) == 0
    doc = json.loads(out.read_text())
    assert doc["pages"] == "contiguous" and len(doc["rows"]) == 4
    assert all(r["mismatch_rows"] == dict(chosen=0, pristine=0) for r in doc["rows"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        bench(tmp_path, "--modes", "graph", "--compare-topk", str(dump))  # random pages, today's default
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "pages contiguous" in err and "pages random" in err, err


def test_the_json_records_the_trees_probe_answers_where_it_has_a_probe(cpu_bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run.json"
    assert bench(tmp_path, "--modes", "graph", "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["sm90_next_n_rows_probe"] is None and doc["pages"] == "random"  # 0.5.14: no probe
    asked = []

    def answers(self, backends):
        asked.append(sorted(backends))
        return dict(function="f", heads=64, head_dim=128, answers={"2": None, "3": True})

    monkeypatch.setattr(trees.Tree, "next_n_rows_probe", answers)
    assert bench(tmp_path, "--modes", "graph", "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["sm90_next_n_rows_probe"]["answers"] == {"2": None, "3": True}
    assert asked == [[(2, False), (2, True), (3, False), (3, True)]]  # the fixture's backends, asked once
    assert "per next_n: {'2': None, '3': True}" in capsys.readouterr().out


def test_a_dump_sized_for_the_compared_grids_matches(cpu_bench, tmp_path, monkeypatch):
    # what ci/run_gpu_layouts.sh does: the pristine part sizes its fixture for the patched part's grids
    monkeypatch.setitem(
        indexer_step.GRIDS, "cpu-small", dict(next_ns=(2,), batch_sizes=(2,), ctxs=(4096,), lengths=("ragged",))
    )
    dump = tmp_path / "dump"
    pristine = ["--grid", "cpu-small", "--fixture-grid", "cpu", "--label", "pristine", "--modes", "graph"]
    assert bench(tmp_path, *pristine, "--dump-topk", str(dump)) == 0
    out = tmp_path / "run.json"
    assert bench(tmp_path, "--modes", "graph", "--json", str(out), "--compare-topk", str(dump)) == 0
    rows = json.loads(out.read_text())["rows"]
    compared = [r for r in rows if "pristine" in r["compared_with"]]
    assert [(r["next_n"], r["batch_size"]) for r in compared] == [(2, 2)]
    assert compared[0]["mismatch_rows"] == dict(chosen=0, pristine=0)


def test_a_dump_without_its_fixture_is_refused(cpu_bench, tmp_path, capsys):
    dump = tmp_path / "dump"
    assert bench(tmp_path, "--label", "pristine", "--modes", "graph", "--dump-topk", str(dump)) == 0
    (dump / "fixture.json").unlink()
    with pytest.raises(SystemExit) as stop:
        bench(tmp_path, "--modes", "graph", "--compare-topk", str(dump))
    assert stop.value.code == 2 and "no fixture.json" in capsys.readouterr().err


def test_the_self_check_moves_on_from_cases_that_keep_every_key(cpu_bench, tmp_path, monkeypatch):
    # The H200 hold-out runs started with next_n 2, 2 requests x 2k: every row keeps all its keys
    # (fewer than index_topk), so no key could be swapped in and the check never ran. It now runs on
    # the first case that leaves a key out.
    monkeypatch.setitem(
        indexer_step.GRIDS, "cpu", dict(next_ns=(2,), batch_sizes=(2,), ctxs=(1024, 4096), lengths=("uniform",))
    )
    out = tmp_path / "run.json"
    assert bench(tmp_path, "--modes", "graph", "--json", str(out)) == 0
    check = json.loads(out.read_text())["comparison_self_check"]
    assert check["detected"] is True and check["result"]["mismatch_rows"] == 1


def test_a_run_whose_cases_all_keep_every_key_says_so(cpu_bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(
        indexer_step.GRIDS, "cpu", dict(next_ns=(2,), batch_sizes=(2,), ctxs=(1024,), lengths=("uniform",))
    )
    assert bench(tmp_path, "--modes", "graph") == 1
    assert "found no case with a key left out of its top-k" in capsys.readouterr().out


def test_unknown_grid_is_refused():
    with pytest.raises(SystemExit, match="unknown grid"):
        indexer_step.main(["--grid", "holdout,nope", "--plan"])
