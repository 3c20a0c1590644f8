"""Shared set-up for the CPU tests of patches 3 and 4 (DSA top-k seed).

Import this module before any ``sglang`` module in a test file.  It relies on
the harness in ``cpu_sglang.py`` (installed by ``conftest.py``) for the tree
selection and the torchvision stand-in, and adds what these two patches need
on a CPU machine:

* ``TRITON_INTERPRET=1`` before triton kernels are decorated, so FutureMap's
  fused gather (``gather_spec_extras``) runs in triton's interpreter;
* ``torch.Tensor.record_stream`` as a no-op for CPU tensors (FutureMap calls
  it on the index tensor; CPU tensors have no stream);
* global server args built with ``object.__new__`` and filled with the
  dataclass defaults (a real ``ServerArgs(...)`` resolves a model from the
  hub in its post-init);
* small builders for the objects the tests drive.

Stand-ins defined here (each stands for one thing that cannot run on CPU):

* ``StandInDecoder``: the DSA MTP decoder layer.  Its indexer needs DeepGEMM
  and a paged fp8 KV cache on a GPU; the stand-in returns a recognisable
  top-k row per token and counts how often the "indexer" ran.
* ``StandInDraftRunner``: the draft ``ModelRunner``; it runs the real
  ``DeepseekModelNextN.forward`` around the stand-in decoder and returns
  logits from a fixed projection instead of the LM head.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import cpu_sglang  # noqa: E402
import torch  # noqa: E402

cpu_sglang.install()

INDEX_TOPK = 8
HIDDEN = 16
VOCAB = 32

_server_args_ready = False


def _cpu_record_stream(self, stream):  # noqa: ARG001 - signature of the original
    """No stream to record on for CPU tensors."""


if not torch.cuda.is_available():
    torch.Tensor.record_stream = _cpu_record_stream


def install_global_server_args(**overrides):
    """Set sglang's global server args to field defaults plus ``overrides``."""
    global _server_args_ready
    server_args_mod = cpu_sglang.import_sglang("sglang.srt.server_args")
    args = object.__new__(server_args_mod.ServerArgs)
    for field in dataclasses.fields(server_args_mod.ServerArgs):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = None
        setattr(args, field.name, value)
    for key, value in overrides.items():
        setattr(args, key, value)
    server_args_mod.set_global_server_args_for_scheduler(args)
    _server_args_ready = True
    return args


def ensure_global_server_args():
    if not _server_args_ready:
        install_global_server_args()


def seed_rows(num_rows: int, base: int = 0) -> torch.Tensor:
    """A seed whose row ``r`` is filled with ``base + r + 1`` (never zero)."""
    rows = torch.arange(base + 1, base + num_rows + 1, dtype=torch.int32)
    return rows.unsqueeze(1).repeat(1, INDEX_TOPK)


def draft_input(num_rows: int, seed=None, base: int = 0, **extra):
    """An ``EagleDraftInput`` whose per-request fields all encode the row."""
    eagle_info = cpu_sglang.import_sglang("sglang.srt.speculative.eagle_info")
    rows = torch.arange(base, base + num_rows)
    kwargs = dict(
        topk_p=rows.float().unsqueeze(1) / 100,
        topk_index=rows.unsqueeze(1),
        hidden_states=rows.float().unsqueeze(1).repeat(1, HIDDEN),
        bonus_tokens=rows.to(torch.int32),
        dsa_topk_indices=seed,
    )
    kwargs.update(extra)
    return eagle_info.EagleDraftInput(**kwargs)


class StandInDecoder(torch.nn.Module):
    """Stands for the DSA ``DeepseekV2DecoderLayer`` of the MTP draft model.

    The real layer runs the sparse-attention indexer (DeepGEMM on a GPU) unless
    it is handed ``prev_topk_indices``.  This one mimics that contract: with
    ``prev_topk_indices`` it returns them unchanged; without, it "runs the
    indexer", counting the call, and returns row ``t`` filled with
    ``1000 * call + t``, so each row names its token and its indexer pass.
    """

    def __init__(self):
        super().__init__()
        self.indexer_calls = 0
        self.prev_seen = []

    def forward(self, positions, hidden_states, forward_batch, residual, *a, **kw):
        prev = kw.get("prev_topk_indices")
        self.prev_seen.append(None if prev is None else prev.clone())
        if prev is not None:
            topk = prev
        else:
            self.indexer_calls += 1
            topk = self.run_indexer(hidden_states, forward_batch)
        return self.mix_topk(hidden_states, topk), residual, topk

    def run_indexer(self, hidden_states, forward_batch):
        tokens = torch.arange(hidden_states.shape[0], dtype=torch.int32)
        return (1000 * self.indexer_calls + tokens).unsqueeze(1).repeat(1, INDEX_TOPK)

    def mix_topk(self, hidden_states, topk):
        """The layer's output (this stand-in's: its input unchanged)."""
        return hidden_states


def nextn_model(decoder: StandInDecoder):
    """A real ``DeepseekModelNextN`` with small plain layers and ``decoder``."""
    nextn = cpu_sglang.import_sglang("sglang.srt.models.deepseek_nextn")
    model = nextn.DeepseekModelNextN.__new__(nextn.DeepseekModelNextN)
    torch.nn.Module.__init__(model)
    model.quant_config = None
    model.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
    model.enorm = torch.nn.Identity()
    model.hnorm = torch.nn.Identity()
    model.rot_weight = None
    model.eh_proj = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
    model.dsa_enable_prefill_cp = False
    model.mla_enable_prefill_cp = False
    model.cp_size = None
    model.decoder = decoder
    model.shared_head = torch.nn.Module()
    model.shared_head.norm = torch.nn.Identity()
    return model


class StandInDraftRunner:
    """Stands for the draft ``ModelRunner`` (GPU model runner + LM head).

    ``forward`` runs the real ``DeepseekModelNextN.forward`` (top-k reuse and
    seed capture live there) and turns its hidden states into logits with a
    fixed projection.
    """

    def __init__(self, decoder: StandInDecoder, index_share=True, index_topk=True):
        self.decoder = decoder
        self.model = nextn_model(decoder)
        hf = SimpleNamespace(architectures=["DeepseekV3ForCausalLMNextN"])
        if index_share:
            hf.index_share_for_mtp_iteration = True
        if index_topk:
            hf.index_topk = INDEX_TOPK
        self.model_config = SimpleNamespace(hf_config=hf)
        self.canary_manager = None
        self.attn_backend = SimpleNamespace()
        self.lm = torch.randn(HIDDEN, VOCAB, generator=torch.Generator().manual_seed(0))
        self.calls = []

    def forward(self, forward_batch):
        self.calls.append(
            dict(
                topk_indices=getattr(forward_batch.spec_info, "dsa_topk_indices", None),
                reuse=forward_batch.reuse_dsa_topk_indices,
            )
        )
        with torch.no_grad():
            hidden = self.model(forward_batch.input_ids, forward_batch.positions, forward_batch)
        logits = hidden @ self.lm
        out = SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
        return SimpleNamespace(logits_output=out)


def draft_worker(runner: StandInDraftRunner, topk: int = 1, num_steps: int = 3):
    """An ``EagleDraftWorker`` built without its GPU ``__init__``.

    Only the attributes ``draft_forward`` and ``_draft_extend_for_decode`` read
    are set; the hf_config fields are read by the patched worker's own state
    initialiser.
    """
    ensure_global_server_args()
    worker_mod = cpu_sglang.import_sglang("sglang.srt.speculative.eagle_worker_v2")
    worker = object.__new__(worker_mod.EagleDraftWorker)
    worker.topk = topk
    worker.speculative_num_steps = num_steps
    worker.speculative_num_draft_tokens = num_steps + 1
    worker.device = "cpu"
    worker.server_args = SimpleNamespace(
        speculative_use_rejection_sampling=False,
        cuda_graph_config=None,
        max_running_requests=8,
    )
    worker.hot_token_id = None
    worker.draft_runner = runner
    worker.draft_attn_backend = SimpleNamespace(attn_backends=[SimpleNamespace() for _ in range(num_steps)])
    worker.cuda_graph_runner_for_draft_extend = None
    worker.plan_stream = None
    worker.plan_stream_ctx = contextlib.nullcontext()
    worker._topk1_parents_prealloc = None
    worker._topk1_score_indices_prealloc = None
    worker._rebuild_topk1_chain_buffers()
    return worker


def forward_batch(mode_name: str, batch_size: int, num_tokens: int, spec_info):
    """A real ``ForwardBatch`` with CPU tensors for ``num_tokens`` tokens."""
    fbi = cpu_sglang.import_sglang("sglang.srt.model_executor.forward_batch_info")
    return fbi.ForwardBatch(
        forward_mode=getattr(fbi.ForwardMode, mode_name),
        batch_size=batch_size,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64),
        req_pool_indices=torch.arange(batch_size),
        seq_lens=torch.full((batch_size,), 10, dtype=torch.int64),
        out_cache_loc=torch.arange(num_tokens, dtype=torch.int64),
        seq_lens_sum=10 * batch_size,
        positions=torch.arange(num_tokens, dtype=torch.int64),
        spec_info=spec_info,
    )
