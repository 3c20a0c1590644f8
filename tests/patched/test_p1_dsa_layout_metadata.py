"""Patch 1: the paged-MQA layout of target_verify, named once in the metadata.

Checks, on the real backend and indexer code:
- PagedMQALayout and the per-token defaults on BaseIndexerMetadata;
- the layout rule where patch 1 decides it (SM100 native as in v0.5.14,
  per-token elsewhere) and the environment switch, read through sglang's
  environ registry;
- the 2D context lengths for each layout (values, shapes, contiguity);
- init_forward_metadata and CUDA-graph capture/replay: layout, context
  lengths and schedule are built together, and replay keeps the captured
  layout while refreshing lengths and schedule in place;
- on every architecture, eager and graph, the schedule and the kernel call
  agree and the top-k equals the per-token one. These tests run at every
  prefix of the series from patch 1 on, so a prefix that hands DeepGEMM a
  schedule made for another layout fails here (the stand-in kernel
  asserts it, as real DeepGEMM would compute wrong rows).
"""

from __future__ import annotations

import itertools

import p12_support as S
import pytest
import torch
from cpu_sglang import import_sglang, init_single_rank_parallel

B = S.backend_mod
ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"
SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65, 700, 1]


def L(name):
    """The patch's PagedMQALayout member called ``name`` (looked up per test)."""
    return S.indexer_mod.PagedMQALayout(name)


MODES = {
    "target_verify": S.ForwardMode.TARGET_VERIFY,
    "decode": S.ForwardMode.DECODE,
    "idle": S.ForwardMode.IDLE,
    "extend": S.ForwardMode.EXTEND,
    "draft_extend_v2": S.ForwardMode.DRAFT_EXTEND_V2,
}


@pytest.fixture(autouse=True)
def _parallel(monkeypatch):
    init_single_rank_parallel()
    monkeypatch.delenv(ENV, raising=False)


def test_tokens_per_row():
    assert [L("per_token").tokens_per_row(n) for n in (1, 2, 4)] == [1, 1, 1]
    assert [L("native").tokens_per_row(n) for n in (2, 3, 4)] == [2, 3, 4]
    assert [L("paired").tokens_per_row(n) for n in (2, 4, 8)] == [2, 2, 2]


def test_base_indexer_metadata_defaults_to_per_token():
    class OtherBackendMetadata(S.indexer_mod.BaseIndexerMetadata):
        def get_seqlens_int32(self):
            return torch.zeros(0, dtype=torch.int32)

        def get_page_table_64(self):
            return torch.zeros((0, 0), dtype=torch.int32)

        def get_page_table_1(self):
            return torch.zeros((0, 0), dtype=torch.int32)

        def get_seqlens_expanded(self):
            return torch.zeros(0, dtype=torch.int32)

        def topk_transform(self, logits, topk):
            return logits.topk(topk).indices

    meta = OtherBackendMetadata()
    assert meta.paged_mqa_layout is L("per_token")
    assert meta.paged_mqa_ctx_lens_2d is None


def test_switch_is_registered_in_sglang_environ(monkeypatch):
    envs = import_sglang("sglang.srt.environ").envs
    assert envs.SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN.get() is False
    monkeypatch.setenv(ENV, "1")
    assert envs.SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN.get() is True


def _select(backend, mode, bs, next_n, num_q_tokens=None, max_context_len=65536):
    num_q_tokens = bs * next_n if num_q_tokens is None else num_q_tokens
    return backend._select_paged_mqa_layout(mode, bs, num_q_tokens, max_context_len)


@pytest.mark.parametrize("arch", ["sm100", "sm80", "hip"])
def test_layout_rule_outside_sm90(monkeypatch, arch):
    S.set_arch(monkeypatch, arch)
    seen = set()
    for next_n, mode, bs in itertools.product([0, 1, 2, 3, 4, 6], MODES, [1, 4, 8, 64]):
        backend = S.make_backend(next_n)
        for width in (4096, 163840):
            got = _select(backend, MODES[mode], bs, next_n, max_context_len=width)
            multi = arch == "sm100" and mode == "target_verify" and next_n >= 2
            assert got is (L("native") if multi else L("per_token")), (arch, next_n, mode, bs)
            seen.add(got)
    assert seen == ({L("per_token"), L("native")} if arch == "sm100" else {L("per_token")})


def test_layout_needs_next_n_tokens_per_request(monkeypatch):
    # a batch whose q rows are not B * next_n (e.g. a partial verify) runs per-token
    S.set_arch(monkeypatch, "sm100")
    backend = S.make_backend(4)
    assert _select(backend, S.ForwardMode.TARGET_VERIFY, 8, 4) is L("native")
    assert _select(backend, S.ForwardMode.TARGET_VERIFY, 8, 4, num_q_tokens=31) is L("per_token")


@pytest.mark.parametrize("arch", ["sm100", "sm90"])
@pytest.mark.parametrize("value,forced", [("1", True), ("true", True), ("0", False)])
def test_env_switch_forces_per_token(monkeypatch, arch, value, forced):
    S.set_arch(monkeypatch, arch)
    S.install_kernels(monkeypatch, S.FakeDeepGemm(num_sms=4))
    monkeypatch.setenv(ENV, value)
    for next_n, bs in itertools.product([2, 4], [8, 64]):
        got = _select(S.make_backend(next_n), S.ForwardMode.TARGET_VERIFY, bs, next_n)
        if forced:
            assert got is L("per_token")
        elif arch == "sm100":
            assert got is L("native")


@pytest.mark.parametrize(
    "next_n,layout,shape_fn",
    [
        (2, "native", lambda b, n: (b, 2)),
        (4, "paired", lambda b, n: (b * 2, 2)),
        (6, "paired", lambda b, n: (b * 3, 2)),
        (4, "per_token", lambda b, n: (b * 4, 1)),
        (3, "per_token", lambda b, n: (b * 3, 1)),
    ],
)
def test_ctx_lens_2d_are_the_per_token_lengths_in_row_shape(monkeypatch, next_n, layout, shape_fn):
    layout = L(layout)
    S.set_arch(monkeypatch, "sm90")
    backend = S.make_backend(next_n)
    bs = len(SEQ_LENS)
    cache = torch.tensor(SEQ_LENS, dtype=torch.int32) + next_n
    expanded = torch.tensor(S.expected_token_lengths(SEQ_LENS, next_n), dtype=torch.int32)
    ctx = backend._build_paged_mqa_schedule_2d_ctx_lens(S.ForwardMode.TARGET_VERIFY, cache, expanded, bs, layout)
    assert tuple(ctx.shape) == shape_fn(bs, next_n)
    assert ctx.is_contiguous() and ctx.dtype == torch.int32
    assert ctx.reshape(-1).tolist() == expanded.tolist()
    if layout is L("paired"):
        # pair p of request b: tokens 2p, 2p+1 see L-n+2p+1 and L-n+2p+2 keys
        for b, s in enumerate(SEQ_LENS):
            length = s + next_n
            for p in range(next_n // 2):
                row = ctx[b * (next_n // 2) + p].tolist()
                assert row == [length - next_n + 2 * p + 1, length - next_n + 2 * p + 2]


def test_sm100_native_keeps_upstream_lengths(monkeypatch):
    S.set_arch(monkeypatch, "sm100")
    backend = S.make_backend(4)
    cache = torch.tensor(SEQ_LENS, dtype=torch.int32) + 4
    expanded = torch.tensor(S.expected_token_lengths(SEQ_LENS, 4), dtype=torch.int32)
    ctx = backend._build_paged_mqa_schedule_2d_ctx_lens(
        S.ForwardMode.TARGET_VERIFY, cache, expanded, len(SEQ_LENS), L("native")
    )
    assert ctx.shape == (len(SEQ_LENS), 4)
    assert torch.equal(ctx, cache.view(-1, 1).expand(-1, 4))


@pytest.mark.parametrize(
    "arch,next_n,layout", [("sm100", 4, "native"), ("sm100", 2, "native"), ("sm80", 4, "per_token")]
)
def test_init_forward_metadata_target_verify(monkeypatch, arch, next_n, layout):
    layout = L(layout)
    S.set_arch(monkeypatch, arch)
    fake = S.FakeDeepGemm(max_tokens_per_row=next_n)
    S.install_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n)
    bs = 10
    seq_lens = SEQ_LENS[:bs]
    backend.init_forward_metadata(S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, seq_lens, next_n))
    meta = backend.forward_metadata
    assert meta.paged_mqa_layout is layout
    t = layout.tokens_per_row(next_n)
    ctx = meta.paged_mqa_ctx_lens_2d
    assert tuple(ctx.shape) == (bs * next_n // t, t)
    # the schedule is built once, from exactly these context lengths
    assert len(fake.get_paged_mqa_logits_metadata.calls) == 1
    (sched_ctx, block_kv, _), _ = fake.get_paged_mqa_logits_metadata.calls[0]
    assert sched_ctx is ctx and block_kv == 64
    # one block-table row per token: every t-th row is the request's own row
    table = meta.real_page_table
    assert table.shape[0] == bs * next_n
    for r in range(bs * next_n // t):
        assert torch.equal(table[r * t], table[(r * t) // next_n * next_n])
    # the indexer metadata carries the same fields
    imeta = backend.get_indexer_metadata(0, S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, seq_lens, next_n))
    assert imeta.paged_mqa_layout is layout
    assert imeta.paged_mqa_ctx_lens_2d is ctx
    assert imeta.paged_mqa_schedule_metadata is meta.paged_mqa_schedule_metadata


@pytest.mark.parametrize("mode", [S.ForwardMode.DECODE, S.ForwardMode.IDLE])
@pytest.mark.parametrize("arch", ["sm100", "sm90"])
def test_decode_stays_per_token(monkeypatch, mode, arch):
    S.set_arch(monkeypatch, arch)
    S.install_kernels(monkeypatch, S.FakeDeepGemm(num_sms=1))
    backend = S.make_backend(4)
    backend.init_forward_metadata(S.make_forward_batch(mode, SEQ_LENS, 4))
    meta = backend.forward_metadata
    assert meta.paged_mqa_layout is L("per_token")
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (len(SEQ_LENS), 1)


def test_env_switch_reaches_metadata(monkeypatch):
    S.set_arch(monkeypatch, "sm100")
    S.install_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=4))
    monkeypatch.setenv(ENV, "1")
    backend = S.make_backend(4)
    backend.init_forward_metadata(S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, SEQ_LENS, 4))
    assert backend.forward_metadata.paged_mqa_layout is L("per_token")
    assert tuple(backend.forward_metadata.paged_mqa_ctx_lens_2d.shape) == (len(SEQ_LENS) * 4, 1)


def capture_then_replay(backend, bs, replay_lens, before_replay=None):
    """Capture TARGET_VERIFY metadata for ``bs``, then replay it with new lengths: in place, the layout kept."""
    return S.capture_then_replay(backend, bs, replay_lens, 32, before_replay, keep=("paged_mqa_layout",))


@pytest.mark.parametrize("arch,next_n,layout", [("sm100", 4, "native"), ("sm80", 4, "per_token")])
def test_cuda_graph_capture_and_replay(monkeypatch, arch, next_n, layout):
    layout = L(layout)
    S.set_arch(monkeypatch, arch)
    fake = S.FakeDeepGemm(max_tokens_per_row=next_n)
    S.install_kernels(monkeypatch, fake)
    bs = 8
    meta = capture_then_replay(S.make_backend(next_n), bs, SEQ_LENS[:bs])
    assert meta.paged_mqa_layout is layout
    t = layout.tokens_per_row(next_n)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n // t, t)
    # replay rebuilt the schedule from the refreshed context lengths
    (sched_ctx, _, _), _ = fake.get_paged_mqa_logits_metadata.calls[-1]
    assert torch.equal(sched_ctx, meta.paged_mqa_ctx_lens_2d)


def test_replay_keeps_the_captured_layout(monkeypatch):
    S.set_arch(monkeypatch, "sm100")
    S.install_kernels(monkeypatch, S.FakeDeepGemm(max_tokens_per_row=4))
    meta = capture_then_replay(S.make_backend(4), 8, SEQ_LENS[:8], lambda: monkeypatch.setenv(ENV, "1"))
    # the switch only applies to batch sizes captured after it was set
    assert meta.paged_mqa_layout is L("native")


# --- every prefix: schedule, context lengths and kernel call agree ---------

KERNEL_TOKENS_PER_ROW = {"sm90": 2, "sm100": 8, "sm80": 1}


def _topk(monkeypatch, arch, next_n, bs, q, w, cuda_graph, forced):
    if forced:
        monkeypatch.setenv(ENV, "1")
    else:
        monkeypatch.delenv(ENV, raising=False)
    S.set_arch(monkeypatch, arch)
    # A small SM count lets the short test contexts qualify for multi-token rows.
    fake = S.FakeDeepGemm(max_tokens_per_row=KERNEL_TOKENS_PER_ROW[arch], num_sms=4)
    S.install_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n)
    seq_lens = (SEQ_LENS * 2)[:bs]
    batch = S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, seq_lens, next_n)
    if cuda_graph:
        capture_then_replay(backend, bs, seq_lens)
    else:
        backend.init_forward_metadata(batch)
    out = S.run_topk(backend, batch, q, w)
    (q_arg, _, _, ctx_arg, table_arg, sched_arg, _), _ = fake.fp8_paged_mqa_logits.calls[-1]
    rows, tokens = q_arg.shape[:2]
    # every token in a kernel row (from patch 2 on, odd next_n may add one copy per request)
    assert rows * tokens in (bs * next_n, bs * (next_n + 1))
    assert tuple(ctx_arg.shape) == (rows, tokens) and table_arg.shape[0] == rows
    return out, tokens


@pytest.mark.parametrize("arch", ["sm90", "sm100", "sm80"])
@pytest.mark.parametrize("next_n", [2, 3, 4])
@pytest.mark.parametrize("bs", [1, 4, 8, 12])
@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_schedule_and_kernel_call_agree(monkeypatch, arch, next_n, bs, cuda_graph):
    # FakeDeepGemm refuses a schedule made from other context lengths, more
    # tokens per row than the arch takes, and block tables of another height.
    q, w = S.make_queries(bs * next_n, seed=bs * 10 + next_n)
    got, tokens = _topk(monkeypatch, arch, next_n, bs, q, w, cuda_graph, forced=False)
    ref, ref_tokens = _topk(monkeypatch, arch, next_n, bs, q, w, cuda_graph, forced=True)
    assert ref_tokens == 1
    assert tokens <= KERNEL_TOKENS_PER_ROW[arch]
    assert torch.equal(got, ref)
