"""Patch 3 on a GPU: the draft CUDA graph reads the DSA top-k seed buffer.

The patched ``EAGLEDraftCudaGraphRunner`` (sglang/srt/speculative/
eagle_draft_cuda_graph_runner.py of a patched tree) is run for real: its
``__init__`` allocates the static ``dsa_seed_topk`` buffer, its
``capture_one_shape`` hands that buffer to the draft step being captured in a
real ``torch.cuda.CUDAGraph`` (one graph per batch size), and its ``execute``
fills the buffer before each replay.  A replay with a new seed must give the
new result, equal to an eager run of the same step; a batch without a seed is
refused by ``can_run_graph`` (it runs eagerly, computing its top-k), so no
replay ever reads a row nobody wrote.

The GPU machine has torch but none of sglang's import-time dependencies
(transformers, pydantic, zmq, ...), so ``import sglang`` is not possible
there.  The runner file is therefore loaded on its own, with the sglang names
it imports bound to the small stand-ins below for the duration of the load;
each stand-in says what it stands for.  The runner's own code is unchanged.

What this test does NOT run: sglang's draft loop.  ``draft_forward`` is a stub, every
sglang module the runner imports is a stand-in, and no indexer, attention backend or DeepGEMM
kernel runs; it shows only that the runner file's capture/replay plumbing moves a seed
buffer.  The patched runner with sglang's own modules (real ``EagleDraftWorker.draft_forward``,
DSA draft backends, FlashMLA, the real indexer in the unseeded eager loop) is
``test_seed_draft_loop.py``.

Where the runner file is looked for, first hit wins:
``$SGLPATCH_SGLANG_TREE/sglang/...``, ``<repo>/.gpu-p34/sglang/...``,
``<repo>/build/sglang/python/sglang/...``.  Skips, with the reason, without
CUDA or without a patched runner file; run with ``pytest -rs`` to see it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

pytestmark = pytest.mark.gpu

_REL = Path("sglang/srt/speculative/eagle_draft_cuda_graph_runner.py")
_REPO = Path(__file__).resolve().parents[2]

INDEX_TOPK = 16
HIDDEN = 32
KV_ROWS = 256
CAPTURE_BS = [1, 2, 4, 8]
NUM_STEPS = 3


def _runner_file():
    roots = []
    if os.environ.get("SGLPATCH_SGLANG_TREE"):
        roots.append(Path(os.environ["SGLPATCH_SGLANG_TREE"]))
    roots += [_REPO / ".gpu-p34", _REPO / "build" / "sglang" / "python"]
    for root in roots:
        if (root / _REL).is_file():
            return root / _REL
    return None


# --------------------------------------------------------------------------
# Stand-ins for the sglang names the runner module imports
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _ForwardInputBuffers:
    """Stands for sglang's ForwardInputBuffers (process-wide buffer pooling,
    which a single runner does not need)."""

    def share_buffers(self):
        pass


@dataclasses.dataclass(frozen=True)
class _ShapeKey:
    """Stands for sglang's ShapeKey: identifies one captured graph."""

    size: int
    stream_idx: object = None
    variant_label: object = None


class _DecodeCudaGraphRunner:
    """Stands for the runner's parent: only the outer capture loop and the
    bucket padding helper it inherits."""

    def capture(self):
        for bs in self.capture_bs:
            self.capture_one_shape(bs, forward=None)

    @staticmethod
    def _pad_to_bucket(raw_size, buckets):
        return min(b for b in buckets if b >= raw_size)


class _GraphBackend:
    """Stands for sglang's decode graph backend: real CUDA graph capture and
    replay of the runner's ``run_once`` (warm-up on a side stream first)."""

    def __init__(self):
        self.graphs, self.outputs = {}, {}

    def capture_one(self, key, run_once, dummies=None, post_warmup_hook=None):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run_once()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.outputs[key] = run_once()
        self.graphs[key] = graph

    def replay(self, key, forward_batch):
        self.graphs[key].replay()
        return self.outputs[key]


class _Kwargs:
    """Stands for a plain data holder (ForwardBatch, EagleDraftInput,
    SamplingBatchInfo): keeps the keyword arguments as attributes."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def mark_forward_metadata_ready(self):
        pass


class _DraftInput(_Kwargs):
    """Stands for EagleDraftInput; hidden size and dtype of the draft model."""

    @classmethod
    def hidden_size_for(cls, worker):
        return HIDDEN

    @classmethod
    def dtype_for(cls, worker):
        return torch.float32


def _grouped_copy(dsts, srcs):
    """Stands for sglang's grouped foreach copy: the same copies, one by one."""
    for dst, src in zip(dsts, srcs, strict=True):
        dst.copy_(src)


def _noop(*args, **kwargs):
    return None


def _stub_modules():
    env_flag = SimpleNamespace(get=lambda: False)
    mode = SimpleNamespace(DECODE="decode")
    names = {
        "sglang.srt.compilation.torch_compile_decoration": dict(set_torch_compile_config=_noop),
        "sglang.srt.environ": dict(envs=SimpleNamespace(SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE=env_flag)),
        "sglang.srt.layers.dp_attention": dict(
            DpPaddingMode=SimpleNamespace(
                get_default_mode_in_cuda_graph=lambda: SimpleNamespace(is_max_len=lambda: False)
            ),
            set_dp_buffer_len=_noop,
            set_is_extend_in_batch=_noop,
        ),
        "sglang.srt.model_executor.forward_batch_info": dict(
            CaptureHiddenMode=SimpleNamespace(LAST="last", NULL="null"),
            ForwardBatch=_Kwargs,
            ForwardMode=mode,
        ),
        "sglang.srt.model_executor.forward_context": dict(
            ForwardContext=_Kwargs, forward_context=lambda ctx: contextlib.nullcontext()
        ),
        "sglang.srt.model_executor.input_buffers": dict(ForwardInputBuffers=_ForwardInputBuffers),
        "sglang.srt.model_executor.runner": dict(
            DecodeCudaGraphRunner=_DecodeCudaGraphRunner,
            DeepEPCudaGraphRunnerAdapter=lambda: SimpleNamespace(capture=_noop, replay=_noop),
            ShapeKey=_ShapeKey,
            _grouped_foreach_copy_=_grouped_copy,
            get_batch_sizes_to_capture=lambda model_runner: (list(CAPTURE_BS), None),
            model_capture_mode=contextlib.nullcontext,
        ),
        "sglang.srt.model_executor.runner_backend.utils": dict(resolve_decode_backend=lambda runner: _GraphBackend()),
        "sglang.srt.model_executor.runner_backend_utils": dict(CUDA_GRAPH_CAPTURE_FAILED_MSG=""),
        "sglang.srt.sampling.sampling_batch_info": dict(SamplingBatchInfo=_Kwargs),
        "sglang.srt.speculative.eagle_info": dict(EagleDraftInput=_DraftInput),
        "sglang.srt.utils": dict(
            require_attn_tp_gather=lambda args: False,
            require_gathered_buffer=lambda args: False,
            require_mlp_sync=lambda args: False,
            require_mlp_tp_gather=lambda args: False,
        ),
        "sglang.srt.utils.async_probe": dict(maybe_detect_nan=_noop, maybe_detect_oob=_noop),
    }
    modules = {}
    for name, attrs in names.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        modules[name] = module
    return modules


def _load_runner_module(path: Path):
    """Import the patched runner file with the stand-ins bound to the sglang
    names; sys.modules is restored afterwards."""
    stubs = _stub_modules()
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        name = "p34_patched_draft_graph_runner"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


# --------------------------------------------------------------------------
# The draft step captured in the graph, and the worker around it
# --------------------------------------------------------------------------


class _SeededDraftWorker:
    """Stands for the patched EagleDraftWorker and its draft model.

    ``draft_forward`` is a small draft step with the patched contract: step 0
    takes its shared top-k from ``spec_info.dsa_topk_indices`` (the seed the
    patched ``draft_forward`` keeps for step 0) and runs sparse
    attention of the hidden state over those KV rows, as the DSA draft layer
    does with ``prev_topk_indices``.  It returns the runner's 4-tuple, the
    attention output in the draft-token slot.
    """

    def __init__(self, seeded: bool):
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.kv = torch.randn(KV_ROWS, HIDDEN, device="cuda", generator=gen)
        self.speculative_num_steps = NUM_STEPS
        self.seed_dsa_topk_from_draft_extend = seeded
        self.dsa_index_topk = INDEX_TOPK if seeded else None
        server_args = SimpleNamespace(
            pp_size=1,
            enable_torch_compile=False,
            disable_cuda_graph_padding=False,
            enable_profile_cuda_graph=False,
            speculative_num_steps=NUM_STEPS,
            speculative_eagle_topk=1,
            speculative_use_rejection_sampling=False,
        )
        fill = SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1)
        self.draft_runner = SimpleNamespace(
            device="cuda",
            tp_size=1,
            dp_size=1,
            server_args=server_args,
            draft_attn_backend=SimpleNamespace(
                attn_backends=[fill],
                init_cuda_graph_state=_noop,
                init_forward_metadata_in_graph=_noop,
                init_forward_metadata_out_graph=_noop,
            ),
            spec_algorithm=SimpleNamespace(is_standalone=lambda: False, is_eagle=lambda: True),
            model_config=SimpleNamespace(vocab_size=1000),
            device_timer=None,
        )

    def step(self, topk_indices, hidden_states):
        keys = self.kv[topk_indices.long()]  # [bs, K, H]
        scores = torch.softmax((keys * hidden_states[:, None, :]).sum(-1), dim=-1)
        return (scores[..., None] * keys).sum(1)

    def draft_forward(self, forward_batch):
        spec = forward_batch.spec_info
        out = self.step(spec.dsa_topk_indices, spec.hidden_states)
        bs = out.shape[0]
        parents = torch.zeros(bs, NUM_STEPS, device="cuda")
        scores_index = torch.zeros(bs, NUM_STEPS, device="cuda")
        return parents, scores_index, out, None


def _forward_batch(bs, seed, hidden):
    spec = _DraftInput(
        topk_p=torch.ones(bs, 1, device="cuda"),
        topk_index=torch.zeros(bs, 1, dtype=torch.int64, device="cuda"),
        hidden_states=hidden,
        draft_probs=None,
        dsa_topk_indices=seed,
    )
    return _Kwargs(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        batch_size=bs,
        seq_lens=torch.full((bs,), 10, device="cuda"),
        seq_lens_cpu=torch.full((bs,), 10),
        seq_lens_sum=10 * bs,
        out_cache_loc=torch.zeros(bs * NUM_STEPS, dtype=torch.int64, device="cuda"),
        positions=torch.zeros(bs, dtype=torch.int64, device="cuda"),
        req_pool_indices=torch.arange(bs, device="cuda"),
        rids_int=None,
        bootstrap_room_ids_int=None,
        sampling_info=None,
        spec_info=spec,
    )


@pytest.fixture(scope="module")
def runner_module():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the test captures a real CUDA graph")
    path = _runner_file()
    if path is None:
        pytest.skip(
            f"no patched {_REL} under $SGLPATCH_SGLANG_TREE, .gpu-p34/ or build/sglang/python: "
            "copy the patched sglang folder there first"
        )
    return _load_runner_module(path)


def _seed(bs, gen):
    return torch.randint(0, KV_ROWS, (bs, INDEX_TOPK), device="cuda", dtype=torch.int32, generator=gen)


def test_replay_reads_new_seed_from_static_buffer(runner_module):
    worker = _SeededDraftWorker(seeded=True)
    runner = runner_module.EAGLEDraftCudaGraphRunner(worker)

    buf = runner.buffers.dsa_seed_topk
    assert buf is not None and buf.is_cuda
    assert buf.dtype == torch.int32 and tuple(buf.shape) == (max(CAPTURE_BS), INDEX_TOPK)
    assert set(runner.backend.graphs) == {_ShapeKey(size=bs) for bs in CAPTURE_BS}

    gen = torch.Generator(device="cuda").manual_seed(1)
    bs = 3  # replays the bs=4 graph with one padded row
    hidden = torch.randn(bs, HIDDEN, device="cuda", generator=gen)
    seed_a, seed_b = _seed(bs, gen), _seed(bs, gen)

    assert runner.can_run_graph(_forward_batch(bs, seed_a, hidden))
    out_a = runner.execute(_forward_batch(bs, seed_a, hidden))[2].clone()
    out_b = runner.execute(_forward_batch(bs, seed_b, hidden))[2].clone()
    torch.cuda.synchronize()

    assert torch.allclose(out_a, worker.step(seed_a, hidden), atol=1e-5)
    assert torch.allclose(out_b, worker.step(seed_b, hidden), atol=1e-5)
    assert not torch.allclose(out_a, out_b, atol=1e-3)  # the new seed was read
    assert torch.equal(buf[:bs], seed_b) and buf[bs:4].eq(0).all()  # padded row: KV slot 0

    # A batch without a seed is not replayed: it runs the draft loop eagerly,
    # which computes its top-k; the graph never reads a row nobody wrote.
    assert runner.can_run_graph(_forward_batch(bs, None, hidden)) is False
    assert torch.equal(buf[:bs], seed_b)  # untouched by the refused batch


def test_no_seed_buffer_without_index_share(runner_module):
    class _UnseededWorker(_SeededDraftWorker):
        """The same draft step for a model without index sharing: it reads a
        fixed top-k, since no seed buffer exists."""

        def draft_forward(self, forward_batch):
            spec = forward_batch.spec_info
            assert spec.dsa_topk_indices is None
            fixed = torch.zeros(spec.hidden_states.shape[0], INDEX_TOPK, dtype=torch.int32, device="cuda")
            out = self.step(fixed, spec.hidden_states)
            bs = out.shape[0]
            return torch.zeros(bs, NUM_STEPS, device="cuda"), torch.zeros(bs, NUM_STEPS, device="cuda"), out, None

    runner = runner_module.EAGLEDraftCudaGraphRunner(_UnseededWorker(seeded=False))
    assert runner.buffers.dsa_seed_topk is None
    hidden = torch.randn(2, HIDDEN, device="cuda")
    assert runner.can_run_graph(_forward_batch(2, None, hidden))  # graphs as in v0.5.14
    out = runner.execute(_forward_batch(2, None, hidden))[2]
    torch.cuda.synchronize()
    assert out.shape == (2, HIDDEN)
