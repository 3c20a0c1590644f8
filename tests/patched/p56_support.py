"""Shared set-up for the CPU tests of patches 5 and 6 (the DSA draft-extend CUDA graph).

Import after ``p34_support`` (which sets ``TRITON_INTERPRET`` and sglang's global server
args) and ``p12_support`` (the DSA backend on CPU, the DeepGEMM stand-in). Everything the
tests drive is sglang's own code: the ``DeepseekSparseAttnBackend`` metadata paths, the
real ``EAGLEDraftExtendCudaGraphRunner`` (its ``__init__``, ``capture_one_shape``,
``can_run_graph`` and ``execute``), ``EagleDraftWorker._draft_extend_for_decode``, the real
``DeepseekModelNextN.forward`` and the real ``Indexer._get_topk_paged``. Stand-ins, each for
one thing that needs a GPU:

* ``StandInGraphBackend``: the CUDA-graph backend. It keeps each captured callable and
  "replays" a graph by calling it again under the runner's attention backend, the way a
  replay re-runs the captured kernels on the static buffers. It cannot see host work a
  real replay would skip; the tests check that the metadata is refreshed in place.
* ``IndexerDecoder``: the DSA decoder layer of the NextN model. It runs the real indexer
  (``Indexer._get_topk_paged`` on the attention backend's metadata, DeepGEMM standing in as
  ``p12_support.FakeDeepGemm``) with queries looked up by token id, and mixes the top-k
  into its hidden states, so every output depends on the metadata the forward saw.
* ``DraftModel``: the draft ``ModelRunner.model``: the real ``DeepseekModelNextN`` around
  that decoder, and a fixed projection for the LM head.
* the runner's ``capture`` loop (warm-up, memory pools) and ``get_batch_sizes_to_capture``.

Because the stand-in replays by calling the captured callable, what a graph records runs again on
every replay: with patch 5 that includes the DSA metadata rebuilt inside the graph
(``init_forward_metadata_in_graph``, its Triton kernel run by triton's interpreter).
``reference_draft_extend_metadata`` is that metadata in plain torch, and ``OpCounter`` counts the
torch ops a piece of host code dispatches.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace

import p12_support as S
import p34_support as sup
import torch
from cpu_sglang import SGLANG_TREE_ENV, import_sglang, init_single_rank_parallel, sglang_tree
from torch.utils._python_dispatch import TorchDispatchMode

graph_mod = import_sglang("sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner")
worker_mod = import_sglang("sglang.srt.speculative.eagle_worker_v2")
eagle_info = import_sglang("sglang.srt.speculative.eagle_info")
input_buffers = import_sglang("sglang.srt.model_executor.input_buffers")
logits_mod = import_sglang("sglang.srt.layers.logits_processor")
spec_info_mod = import_sglang("sglang.srt.speculative.spec_info")
fbi = S.fbi
fctx = S.fctx

VOCAB = sup.VOCAB
HIDDEN = sup.HIDDEN


def install(monkeypatch, next_n: int) -> None:
    """CPU stand-ins for one test: DeepGEMM on SM90, the single-rank group, global server args."""
    init_single_rank_parallel()
    S.set_arch(monkeypatch, "sm90")
    S.install_kernels(monkeypatch, S.FakeDeepGemm(num_sms=4))
    sup.install_global_server_args(
        speculative_eagle_topk=1,
        speculative_num_steps=next_n - 1,
        speculative_num_draft_tokens=next_n,
        disable_cuda_graph_padding=False,
    )
    monkeypatch.setattr(graph_mod, "set_dp_buffer_len", lambda *a, **k: None)
    # Runners share input buffers through a process-wide pool; start each test empty.
    monkeypatch.setattr(input_buffers, "_forward_input_buffer_pool", {})


def make_backend(next_n: int):
    """A DSA draft-extend backend (sglang's code, CPU tensors, an index-K cache of random keys)."""
    return S.make_backend(next_n, num_reqs=8)


class IndexerDecoder(sup.StandInDecoder):
    """The NextN decoder layer: the real indexer on this forward's metadata (see module docstring)."""

    def __init__(self, seed: int = 0, gives_topk: bool = True):
        super().__init__()
        self.gives_topk = gives_topk  # False: a draft layer that hands no top-k back
        self.q_fp8, weights = S.make_queries(VOCAB, seed=seed)
        # Positive head weights: the best keys score above zero, so no top-k row is decided by ties
        # (relu leaves many zero scores, ordered differently for logits of another width).
        self.weights = weights.abs()
        # Built without nn.Module.__init__ (it needs no weights here): kept out of the module tree.
        self._indexer = (S.make_indexer(),)

    def forward(self, *args, **kwargs):
        hidden, residual, topk = super().forward(*args, **kwargs)
        return hidden, residual, topk if self.gives_topk else None

    def run_indexer(self, hidden_states, forward_batch):
        metadata = fctx.get_attn_backend().get_indexer_metadata(0, forward_batch)
        ids = forward_batch.input_ids
        return self._indexer[0]._get_topk_paged(forward_batch, 0, self.q_fp8[ids], self.weights[ids], metadata)

    def mix_topk(self, hidden_states, topk):
        return hidden_states + topk.float().mean(dim=-1, keepdim=True) / 100


class DraftModel:
    """The draft model runner's model: real DeepseekModelNextN + a fixed LM head."""

    def __init__(self, decoder: IndexerDecoder):
        self.decoder = decoder
        self.nextn = sup.nextn_model(decoder)
        gen = torch.Generator().manual_seed(3)
        self.lm = torch.randn(HIDDEN, VOCAB, generator=gen)
        with torch.no_grad():
            for p in self.nextn.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))

    def forward(self, input_ids, positions, forward_batch):
        with torch.no_grad():
            hidden = self.nextn(input_ids, positions, forward_batch)
        return logits_mod.LogitsProcessorOutput(next_token_logits=hidden @ self.lm, hidden_states=hidden)


class StandInGraphBackend:
    """The CUDA-graph backend (see module docstring)."""

    def __init__(self, runner):
        self.runner = runner
        self.graphs = {}
        self.replayed = []

    def capture_one(self, shape_key, run_once, dummies, post_warmup_hook):
        assert shape_key not in self.graphs, f"{shape_key} captured twice"
        run_once()  # warm-up, as the real backend runs it before capturing
        self.graphs[shape_key] = run_once
        run_once()

    def replay(self, shape_key, forward_batch):
        self.replayed.append(shape_key.size)
        ctx = fctx.ForwardContext(attn_backend=self.runner.draft_extend_attn_backend)
        with fctx.forward_context(ctx):
            return self.graphs[shape_key]()

    def can_run(self, forward_batch, bs):
        return any(key.size == bs for key in self.graphs)


def _stand_in_capture(runner):
    """DecodeCudaGraphRunner.capture without warm-up and memory pools: each size, largest first."""
    runner.buffers.seq_lens.fill_(runner.seq_len_fill_value)
    runner.buffers.seq_lens_cpu.fill_(runner.seq_len_fill_value)
    for bs in reversed(runner.capture_bs):
        runner.capture_one_shape(bs, forward=None)


class DraftRunner:
    """The draft ``ModelRunner`` the worker and the graph runner read (model, configs, pools)."""

    def __init__(self, decoder: IndexerDecoder, backend, index_share: bool = True):
        hf = SimpleNamespace(architectures=["DeepseekV32ForCausalLMNextN"], index_topk=S.INDEX_TOPK)
        if index_share:
            hf.index_share_for_mtp_iteration = True
        self.model = DraftModel(decoder)
        self.model_config = SimpleNamespace(
            hf_config=hf, vocab_size=VOCAB, spec_hidden_size=HIDDEN, dtype=torch.float32
        )
        self.attn_backend = backend
        self.device = "cpu"
        self.tp_size = self.dp_size = 1
        self.server_args = import_sglang("sglang.srt.server_args").get_global_server_args()
        self.spec_algorithm = spec_info_mod.SpeculativeAlgorithm.EAGLE
        self.canary_manager = None
        self.device_timer = None
        self.req_to_token_pool = backend.req_to_token_pool
        self.eager_forwards = 0

    def forward(self, forward_batch):
        """ModelRunner.forward of an eager batch whose metadata the worker already built."""
        self.eager_forwards += 1
        with fctx.forward_context(fctx.ForwardContext(attn_backend=self.attn_backend)):
            out = self.model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch)
        return SimpleNamespace(logits_output=out)


def draft_worker(next_n: int, decoder: IndexerDecoder, backend, index_share: bool = True):
    """An ``EagleDraftWorker`` (no GPU ``__init__``) around ``DraftRunner``; no draft-extend graph yet."""
    runner = DraftRunner(decoder, backend, index_share=index_share)
    worker = sup.draft_worker(runner, num_steps=next_n - 1)
    worker.speculative_algorithm = spec_info_mod.SpeculativeAlgorithm.EAGLE
    worker.target_worker = SimpleNamespace(model_runner=runner, device="cuda")
    worker.draft_extend_attn_backend = backend
    worker._init_dsa_index_share_state()
    return worker


def make_runner(monkeypatch, worker, capture_bs):
    """The real EAGLEDraftExtendCudaGraphRunner for ``worker``, captured for ``capture_bs`` on CPU."""
    backends = []

    def resolve(runner):
        backends.append(StandInGraphBackend(runner))
        return backends[-1]

    monkeypatch.setattr(graph_mod, "get_batch_sizes_to_capture", lambda model_runner: (list(capture_bs), []))
    monkeypatch.setattr(graph_mod, "resolve_decode_backend", resolve)
    monkeypatch.setattr(graph_mod.EAGLEDraftExtendCudaGraphRunner, "capture", _stand_in_capture)
    runner = graph_mod.EAGLEDraftExtendCudaGraphRunner(worker)
    worker.cuda_graph_runner_for_draft_extend = runner
    return runner


def capture_worker_graphs(monkeypatch, worker, capture_bs, cuda: bool = True):
    """The real ``EagleDraftWorker._capture_cuda_graphs`` on CPU, the platform standing in as CUDA (or
    not, ``cuda=False``): the draft-extend runner is the real one (with ``make_runner``'s stand-ins), the
    draft-decode runner a recorder (patch 3's tests cover it). Returns the draft-extend runner or None."""
    monkeypatch.setattr(worker_mod, "_is_cuda", cuda)
    monkeypatch.setattr(worker_mod, "check_cuda_graph_backend", lambda *args: False)
    monkeypatch.setattr(worker_mod, "get_batch_sizes_to_capture", lambda *args: (list(capture_bs), []))
    monkeypatch.setattr(worker_mod, "get_available_gpu_memory", lambda *args, **kwargs: 0.0)
    monkeypatch.setattr(worker_mod, "EAGLEDraftCudaGraphRunner", lambda w: SimpleNamespace(draft_decode_of=w))
    monkeypatch.setattr(graph_mod, "get_batch_sizes_to_capture", lambda model_runner: (list(capture_bs), []))
    monkeypatch.setattr(graph_mod, "resolve_decode_backend", StandInGraphBackend)
    monkeypatch.setattr(graph_mod.EAGLEDraftExtendCudaGraphRunner, "capture", _stand_in_capture)
    worker.server_args.model_impl = "auto"
    worker.server_args.cuda_graph_config = SimpleNamespace(decode=SimpleNamespace(backend="full"))
    worker.gpu_id = 0
    worker._capture_cuda_graphs()
    return worker.cuda_graph_runner_for_draft_extend


def run_draft_extend_for_decode(worker, fb, accept_lens):
    """The real ``EagleDraftWorker._draft_extend_for_decode`` after a verify that accepted ``accept_lens``.

    ``prepare_for_draft_extend`` stands for the base step that builds the ForwardBatch from a
    ScheduleBatch and the KV pools: it returns ``fb`` and, like the real one, builds the eager
    metadata when the graph runner cannot take the batch. Returns the next draft input.
    """
    next_n = worker.speculative_num_draft_tokens
    bs = fb.batch_size

    def prepare_for_draft_extend(draft_extend_input, batch, predict, num_draft_tokens, model_runner, graph_runner):
        assert torch.equal(predict, fb.input_ids)
        fb.spec_info = draft_extend_input
        if not (graph_runner and graph_runner.can_run_graph(fb)):
            model_runner.attn_backend.init_forward_metadata(fb)
        return fb

    worker.prepare_for_draft_extend = prepare_for_draft_extend
    batch_result = SimpleNamespace(
        logits_output=SimpleNamespace(hidden_states=fb.spec_info.hidden_states),
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
        next_token_ids=fb.input_ids.clone(),
        next_draft_input=eagle_info.EagleDraftInput(bonus_tokens=torch.zeros(bs, dtype=torch.int32)),
    )
    batch = SimpleNamespace(seq_lens=fb.seq_lens - next_n, sampling_info=None, forward_mode=fb.forward_mode)
    worker._draft_extend_for_decode(batch, batch_result)
    return batch_result.next_draft_input


def last_verified_rows(accept_lens, next_n):
    """The row of each request's last verified token in a draft-extend batch."""
    return torch.tensor([i * next_n + a - 1 for i, a in enumerate(accept_lens)])


def seq_lens_for(bs: int, next_n: int, seed: int = 0) -> list[int]:
    """KV lengths after draft-extend wrote its next_n slots (prefix + next_n), ragged, some past 64."""
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(100, S.MAX_CONTEXT - 2 * next_n, (bs,), generator=gen)
    return (prefix + next_n).tolist()


def draft_extend_batch(next_n: int, seq_lens, accept_lens, seed: int = 0, req_pool_indices=None):
    """A real DRAFT_EXTEND_V2 ForwardBatch as prepare_for_draft_extend builds it after verify."""
    bs = len(seq_lens)
    gen = torch.Generator().manual_seed(seed + 11)
    num_tokens = bs * next_n
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    accept = torch.tensor(accept_lens, dtype=torch.int32)
    spec = eagle_info.EagleDraftExtendInput(
        hidden_states=torch.randn(num_tokens, HIDDEN, generator=gen),
        num_correct_drafts=accept - 1,
        num_accept_tokens=accept,
        num_tokens_per_req=next_n,
        num_tokens_for_logprob_per_req=next_n,
    )
    pools = torch.arange(1, bs + 1) if req_pool_indices is None else torch.tensor(req_pool_indices)
    positions = torch.cat([torch.arange(s - next_n, s) for s in seq_lens])
    fb = fbi.ForwardBatch(
        forward_mode=fbi.ForwardMode.DRAFT_EXTEND_V2,
        batch_size=bs,
        input_ids=torch.randint(0, VOCAB, (num_tokens,), generator=gen),
        req_pool_indices=pools,
        seq_lens=lens,
        out_cache_loc=torch.arange(num_tokens, dtype=torch.int64),
        seq_lens_sum=int(lens.sum()),
        seq_lens_cpu=lens.clone(),
        positions=positions,
        extend_num_tokens=num_tokens,
        extend_seq_lens=torch.full((bs,), next_n, dtype=torch.int32),
        extend_seq_lens_cpu=[next_n] * bs,
        extend_prefix_lens_cpu=[s - next_n for s in seq_lens],
        spec_info=spec,
        capture_hidden_mode=fbi.CaptureHiddenMode.FULL,
    )
    return fb


def run_eager(worker, fb):
    """What the worker runs when the graph cannot: the backend's eager metadata, then the model."""
    backend = worker.draft_extend_attn_backend
    backend.init_forward_metadata(fb)
    with fctx.forward_context(fctx.ForwardContext(attn_backend=backend)):
        return worker.draft_runner.model.forward(fb.input_ids, fb.positions, fb)


def reference_draft_extend_metadata(seq_lens, req_pool_indices, req_to_token, next_n: int, topk: int, page: int):
    """A DRAFT_EXTEND_V2 graph's metadata in plain torch: each request's key count (at least next_n, so a
    padded row's tokens see 1..next_n keys) and their prefix sums; token j of a request with L keys sees
    L - next_n + 1 + j keys, at most top-k for the sparse attention, and their prefix sums; each token row's
    KV slots (``slots``) and page numbers (``pages``) up to its request's key count."""
    keys = seq_lens.to(torch.int32).clamp(min=next_n)
    expanded = (keys[:, None] - next_n + 1 + torch.arange(next_n, dtype=torch.int32)).reshape(-1)
    clipped = expanded.clamp(max=topk)
    slots = [req_to_token[int(p), : int(k)] for p, k in zip(req_pool_indices, keys, strict=True) for _ in range(next_n)]
    return SimpleNamespace(
        cache_seqlens=keys,
        cu_seqlens_k=_prefix_sums(keys),
        seqlens_expanded=expanded,
        dsa_seqlens=clipped,
        dsa_cu_seqlens=_prefix_sums(clipped),
        slots=slots,
        pages=[row[::page] // page for row in slots],
    )


def _prefix_sums(values):
    return torch.nn.functional.pad(torch.cumsum(values, 0, dtype=torch.int32), (1, 0))


def write_reference_draft_extend_metadata(*, page_table, real_page_table, **kw):
    """``fill_draft_extend_metadata``'s outputs, written from ``reference_draft_extend_metadata``: a fast
    stand-in for the kernel where a test looks at what runs outside the graph, not inside it."""
    ref = reference_draft_extend_metadata(
        kw["seq_lens"], kw["req_pool_indices"], kw["req_to_token"], kw["next_n"], kw["topk"], kw["page_size"]
    )
    for name in ("cache_seqlens", "cu_seqlens_k", "seqlens_expanded", "dsa_seqlens", "dsa_cu_seqlens"):
        value = getattr(ref, name)
        kw[name][: value.numel()].copy_(value)
    for row, (slots, pages) in enumerate(zip(ref.slots, ref.pages, strict=True)):
        page_table[row, : slots.numel()] = slots
        real_page_table[row, : pages.numel()] = pages


VIEW_OPS = {"view", "_unsafe_view", "slice", "select", "unsqueeze", "squeeze", "as_strided", "alias", "t"}
VIEW_OPS |= {"expand", "_reshape_alias", "detach", "lift_fresh", "reshape", "transpose", "split", "unbind"}


class OpCounter(TorchDispatchMode):
    """Counts the torch ops (views aside: they launch nothing on a GPU) dispatched while active and not paused."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if not self.paused and name not in VIEW_OPS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    def total(self) -> int:
        return sum(self.ops.values())


GPU_TEST = "test/registered/attention/unittests/dsa/test_dsa_draft_extend_cuda_graph.py"

# A child pytest on the tree's own test file, with the CPU harness (the torchvision stand-in) and a
# stand-in for Hugging Face datasets, which sglang.test.test_utils imports and this CPU set lacks.
_GPU_TEST_DRIVER = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import cpu_sglang
cpu_sglang.install()
import pytest
sys.exit(pytest.main(["-p", "no:cacheprovider", "-q", "-W", "ignore", "--junitxml", sys.argv[3], sys.argv[4]]))
"""
_DATASETS_STANDIN = "def load_dataset(*args, **kwargs):\n    raise RuntimeError('stand-in: no dataset is loaded')\n"


def collect_gpu_test(tmp_path: Path) -> dict:
    """Run the patches' GPU test in sglang's tree with pytest here (no GPU): {test class: {test: skip reason
    or outcome}}, from pytest's junit report."""
    test_file = sglang_tree().parent / GPU_TEST
    assert test_file.is_file(), f"{test_file}: the patch's test in sglang's tree is missing"
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text(_DATASETS_STANDIN)
    report = tmp_path / "junit.xml"
    here = Path(__file__).resolve().parent
    args = [sys.executable, "-c", _GPU_TEST_DRIVER, str(here), str(tmp_path), str(report), str(test_file)]
    env = {**os.environ, SGLANG_TREE_ENV: str(sglang_tree())}
    run = subprocess.run(args, cwd=test_file.parents[4], env=env, capture_output=True, text=True, timeout=600)
    assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    classes = collections.defaultdict(dict)
    for case in ElementTree.parse(report).iter("testcase"):
        skipped = case.find("skipped")
        outcome = skipped.get("message", "") if skipped is not None else "ran"
        classes[case.get("classname").rsplit(".", 1)[-1]][case.get("name")] = outcome
    return dict(classes)
