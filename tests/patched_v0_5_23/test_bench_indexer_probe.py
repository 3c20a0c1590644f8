"""bench/indexer_step.py on the v0.5.23 line's tree: the probe answers it records, the layouts it names, the
GPU test's expectation of them, and its fixture's index heads and pages.

- ``Tree0523.next_n_rows_probe`` (bench/indexer/trees.py) records, per next_n, what the backend's probe of
  [B, next_n] rows answered (FakeDeepGemm: 6 tokens per row for the read-once build, 2 for stock), without
  asking DeepGEMM again; a tree without patch 2's probe records nothing.
- The layout bench/indexer/fixture.py's ``layout_of`` names from the real backend's metadata, and its
  tokens per row, are what tests/gpu/gpu_trees.py's ``expected_sm90_rows_v0_5_23`` gives with that answer;
  that expectation is the tree's own rule for every next_n 1-8 and batch size 1-160.
- The real fixture (in a child process: the DSA kit's runner and sglang's triton act_quant, run by triton's
  interpreter) gives the backends the indexer's 64 index heads, not the kit's one, and lays each request's
  pages in one run with ``pages="contiguous"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness23
import pytest
import support23 as S
from cpu_sglang import import_sglang

from bench.indexer import trees
from bench.indexer.fixture import INDEX_HEADS, PAGE, layout_of

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gpu"))

import gpu_trees  # noqa: E402

TV = S.ForwardMode.TARGET_VERIFY
READ_ONCE, STOCK = 6, 2  # query tokens per row SM90 DeepGEMM takes
LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1, 90, 400, 80, 1000]


@pytest.fixture(autouse=True)
def _not_forced(monkeypatch):
    monkeypatch.delenv(S.FORCE_ENV, raising=False)


def fixture_backends(next_ns) -> dict:
    """(next_n, forced per-token) -> backend, as the bench's fixture holds them."""
    return {(n, forced): S.make_backend(n) for n in next_ns for forced in (False, True)}


@pytest.mark.parametrize("max_tokens,answer", [(READ_ONCE, True), (STOCK, False)], ids=["read-once", "stock"])
def test_the_record_is_the_answer_each_backend_got(monkeypatch, max_tokens, answer):
    probed = S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=max_tokens))
    backends = fixture_backends((3, 4, 5))
    with S.platform(monkeypatch, "sm90"):
        tokens = {n: backends[(n, False)]._paged_mqa_tokens_per_row(TV, 32) for n in (3, 4, 5)}
        asked = len(probed.fp8_paged_mqa_logits.calls)
        record = trees.Tree0523("0.5.23").next_n_rows_probe(backends)
    assert record["answers"] == {"3": answer, "4": None, "5": answer}
    assert (record["heads"], record["head_dim"]) == (S.NUM_HEADS, S.HEAD_DIM)
    assert len(probed.fp8_paged_mqa_logits.calls) == asked  # the backends' answers, DeepGEMM not asked again
    assert tokens == {3: 3 if answer else 1, 4: 2, 5: 5 if answer else 1}


def test_odd_next_n_the_backend_has_not_asked_about_are_asked_once(monkeypatch):
    probed = S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=READ_ONCE))
    record = trees.Tree0523("0.5.23").next_n_rows_probe(fixture_backends((3, 6)))
    assert record["answers"] == {"3": True, "6": None}
    assert [tuple(args[0].shape[:2]) for args, _ in probed.fp8_paged_mqa_logits.calls] == [(1, 3), (3, 1)]


def test_a_tree_without_the_probe_records_nothing(monkeypatch):
    S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=READ_ONCE))
    rule = import_sglang("sglang.kernels.ops.attention.dsa.paged_mqa_logits")
    monkeypatch.delattr(rule, "sm90_paged_mqa_takes_next_n_rows")
    assert trees.Tree0523("0.5.23").next_n_rows_probe(fixture_backends((3,))) is None
    assert trees.Tree("0.5.14").next_n_rows_probe(fixture_backends((3,))) is None


@pytest.mark.parametrize("answer", [True, False], ids=["yes", "no"])
@pytest.mark.parametrize("next_n,bs", [(2, 4), (2, 16), (3, 8), (4, 2), (4, 8), (5, 6), (6, 2), (6, 6)])
def test_the_layout_the_bench_names_is_the_gpu_tests_expectation(monkeypatch, next_n, bs, answer):
    S.use_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=READ_ONCE if answer else STOCK))
    backend = S.make_backend(next_n, num_reqs=16)
    with S.platform(monkeypatch, "sm90"):
        backend.init_forward_metadata(S.make_forward_batch(TV, LENS[:bs], next_n))
    tokens = backend.forward_metadata.paged_mqa_ctx_lens_2d.shape[1]
    assert (layout_of(backend, next_n), tokens) == gpu_trees.expected_sm90_rows_v0_5_23(next_n, bs, answer)


def test_the_gpu_tests_expectation_is_the_trees_rule():
    rule = import_sglang("sglang.kernels.ops.attention.dsa.paged_mqa_logits").pick_sm90_paged_mqa_tokens_per_row
    for next_n in range(1, 9):
        for bs in range(1, 161):
            for answer in (False, True):
                _, tokens = gpu_trees.expected_sm90_rows_v0_5_23(next_n, bs, answer)
                assert tokens == rule(next_n, bs, answer), (next_n, bs, answer)


CHILD = """
import json, sys
import harness23
harness23.install()
import torch
torch.cuda.get_device_capability = lambda *args: (9, 0)  # read by the backend's __init__; CPU torch has no CUDA
from bench.indexer import trees
from bench.indexer.fixture import Calls, Fixture
tree = trees.for_tree(harness23.sglang_tree())
fx = Fixture(2, 1024, (3,), "cpu", Calls(tree), tree=tree, pages="contiguous")
print(json.dumps(dict(
    heads=sorted({(b.dsa_index_n_heads, b.dsa_index_head_dim) for b in fx.backends.values()}),
    slots=fx.req_to_token[:2, :1024].tolist(),
    probe=tree.next_n_rows_probe(fx.backends),
)))
"""


def test_the_fixture_gives_the_backend_the_indexers_heads_and_contiguous_pages():
    harness23.require()
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(REPO), str(here), str(REPO / "tests" / "patched")])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["heads"] == [[INDEX_HEADS, 128]]
    assert got["slots"] == [list(range(PAGE + i * 1024, PAGE + (i + 1) * 1024)) for i in range(2)]
    # on a CPU there is no DeepGEMM to call: the probe's "any exception is a no"
    assert got["probe"]["answers"] == {"3": False} and got["probe"]["heads"] == INDEX_HEADS
