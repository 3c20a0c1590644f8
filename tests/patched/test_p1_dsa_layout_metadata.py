"""Patch 1 (dsa_backend.py): the paged-MQA layout of target_verify metadata.

Checks, on the real backend code:
- the layout rule for every (arch, next_n, forward mode, batch size) case,
  and the environment switch that forces per-token;
- the 2D context lengths for each layout (values, shapes, contiguity);
- init_forward_metadata: layout, context lengths and schedule are built once
  per forward and agree; the block table keeps one row per token so every
  t-th row is a request's row;
- CUDA-graph capture and replay: the layout is fixed per captured batch
  size; replay refreshes context lengths and schedule in place.
"""

from __future__ import annotations

import itertools

import p12_support as S
import pytest
import torch
from cpu_sglang import init_single_rank_parallel

B = S.backend_mod
MIN_BS = 8  # SM90_PAGED_MQA_MIN_BATCH_SIZE, chosen from the H200 measurements
ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"


def L(name):
    """The patch's PagedMQALayout member called ``name`` (looked up per test)."""
    return S.backend_mod.PagedMQALayout(name)


MODES = {
    "target_verify": S.ForwardMode.TARGET_VERIFY,
    "decode": S.ForwardMode.DECODE,
    "idle": S.ForwardMode.IDLE,
    "extend": S.ForwardMode.EXTEND,
    "draft_extend_v2": S.ForwardMode.DRAFT_EXTEND_V2,
}


@pytest.fixture(autouse=True)
def _parallel():
    init_single_rank_parallel()


def expected_layout(arch, next_n, mode, batch_size, forced=False):
    """The rule, written out independently of the patch."""
    if mode != "target_verify" or next_n is None or next_n < 2 or arch == "hip" or forced:
        return L("per_token")
    if arch == "sm100":
        return L("native")
    if arch == "sm90" and batch_size >= MIN_BS:
        if next_n == 2:
            return L("native")
        if next_n % 2 == 0:
            return L("paired")
    return L("per_token")


def test_threshold_is_the_measured_one():
    # docs/patches/0001-*.md: per-token wins below 8 requests on H200.
    assert B.SM90_PAGED_MQA_MIN_BATCH_SIZE == MIN_BS


@pytest.mark.parametrize("arch", list(S.ARCHES))
def test_layout_rule_every_case(monkeypatch, arch):
    monkeypatch.delenv(ENV, raising=False)
    S.set_arch(monkeypatch, arch)
    next_ns = [0, 1, 2, 3, 4, 5, 6, 8]
    batch_sizes = [1, 2, 4, MIN_BS - 1, MIN_BS, MIN_BS + 1, 32, 128, 512]
    seen = set()
    for next_n, mode, bs in itertools.product(next_ns, MODES, batch_sizes):
        got = B.select_paged_mqa_layout(MODES[mode], next_n, bs)
        want = expected_layout(arch, next_n, mode, bs)
        assert got is want, (arch, next_n, mode, bs, got)
        seen.add(got)
    want_seen = {
        "sm100": {L("per_token"), L("native")},
        "sm90": {L("per_token"), L("native"), L("paired")},
        "sm80": {L("per_token")},
        "hip": {L("per_token")},
    }[arch]
    assert seen == want_seen


@pytest.mark.parametrize("arch", ["sm100", "sm90"])
@pytest.mark.parametrize("value,forced", [("1", True), ("true", True), ("0", False)])
def test_env_switch_forces_per_token(monkeypatch, arch, value, forced):
    S.set_arch(monkeypatch, arch)
    monkeypatch.setenv(ENV, value)
    for next_n, bs in itertools.product([2, 4, 6], [MIN_BS, 64]):
        got = B.select_paged_mqa_layout(S.ForwardMode.TARGET_VERIFY, next_n, bs)
        assert got is expected_layout(arch, next_n, "target_verify", bs, forced)


def test_tokens_per_row():
    assert [L("per_token").tokens_per_row(n) for n in (1, 2, 4)] == [1, 1, 1]
    assert [L("native").tokens_per_row(n) for n in (2, 3, 4)] == [2, 3, 4]
    assert [L("paired").tokens_per_row(n) for n in (2, 4, 8)] == [2, 2, 2]


SEQ_LENS = [100, 300, 64, 500, 7, 200, 900, 33, 128, 65]


@pytest.mark.parametrize(
    "arch,next_n,layout,shape_fn",
    [
        ("sm90", 2, "native", lambda b, n: (b, 2)),
        ("sm90", 4, "paired", lambda b, n: (b * 2, 2)),
        ("sm90", 6, "paired", lambda b, n: (b * 3, 2)),
        ("sm90", 4, "per_token", lambda b, n: (b * 4, 1)),
        ("sm90", 3, "per_token", lambda b, n: (b * 3, 1)),
    ],
)
def test_ctx_lens_2d_are_the_per_token_lengths_in_row_shape(monkeypatch, arch, next_n, layout, shape_fn):
    layout = L(layout)
    S.set_arch(monkeypatch, arch)
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
    "arch,next_n,bs,layout",
    [
        ("sm90", 2, 10, "native"),
        ("sm90", 4, 10, "paired"),
        ("sm90", 4, 4, "per_token"),
        ("sm90", 3, 10, "per_token"),
        ("sm100", 4, 4, "native"),
        ("sm80", 4, 10, "per_token"),
    ],
)
def test_init_forward_metadata_target_verify(monkeypatch, arch, next_n, bs, layout):
    layout = L(layout)
    S.set_arch(monkeypatch, arch)
    fake = S.FakeDeepGemm()
    S.install_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n)
    seq_lens = SEQ_LENS[:bs]
    backend.init_forward_metadata(S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, seq_lens, next_n))
    meta = backend.forward_metadata
    assert meta.paged_mqa_layout is layout
    t = layout.tokens_per_row(next_n)
    ctx = meta.paged_mqa_ctx_lens_2d
    assert tuple(ctx.shape) == (bs * next_n // t, t)
    if not (arch == "sm100" and layout is L("native")):
        assert ctx.reshape(-1).tolist() == S.expected_token_lengths(seq_lens, next_n)
    # the schedule is built once, from exactly these context lengths
    assert len(fake.get_paged_mqa_logits_metadata.calls) == 1
    (sched_ctx, block_kv, _), _ = fake.get_paged_mqa_logits_metadata.calls[0]
    assert sched_ctx is ctx and block_kv == 64
    assert meta.paged_mqa_schedule_metadata is not None
    # one block-table row per token: every t-th row is the request's own row
    table = meta.real_page_table
    assert table.shape[0] == bs * next_n
    rows = table[::t]
    for r in range(rows.shape[0]):
        req = (r * t) // next_n
        assert torch.equal(rows[r], table[req * next_n])
    # and the indexer metadata carries the same three fields
    imeta = backend.get_indexer_metadata(0, S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, seq_lens, next_n))
    assert imeta.paged_mqa_layout is layout
    assert imeta.paged_mqa_ctx_lens_2d is ctx
    assert imeta.paged_mqa_schedule_metadata is meta.paged_mqa_schedule_metadata


@pytest.mark.parametrize("mode", [S.ForwardMode.DECODE, S.ForwardMode.IDLE])
def test_decode_stays_per_token(monkeypatch, mode):
    S.set_arch(monkeypatch, "sm90")
    S.install_kernels(monkeypatch, S.FakeDeepGemm())
    backend = S.make_backend(4)
    backend.init_forward_metadata(S.make_forward_batch(mode, SEQ_LENS, 4))
    meta = backend.forward_metadata
    assert meta.paged_mqa_layout is L("per_token")
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (len(SEQ_LENS), 1)


def test_env_switch_reaches_metadata(monkeypatch):
    S.set_arch(monkeypatch, "sm90")
    S.install_kernels(monkeypatch, S.FakeDeepGemm())
    monkeypatch.setenv(ENV, "1")
    backend = S.make_backend(4)
    backend.init_forward_metadata(S.make_forward_batch(S.ForwardMode.TARGET_VERIFY, SEQ_LENS, 4))
    assert backend.forward_metadata.paged_mqa_layout is L("per_token")
    assert tuple(backend.forward_metadata.paged_mqa_ctx_lens_2d.shape) == (len(SEQ_LENS) * 4, 1)


def _capture_and_replay(monkeypatch, next_n, bs, replay_lens, flip_env=False):
    fake = S.FakeDeepGemm()
    S.install_kernels(monkeypatch, fake)
    backend = S.make_backend(next_n)
    backend.init_cuda_graph_state(max_bs=32, max_num_tokens=32 * next_n)
    capture_lens = torch.full((bs,), 1, dtype=torch.int64)  # capture-time fill value
    backend._apply_cuda_graph_metadata(
        bs=bs,
        req_pool_indices=torch.arange(1, bs + 1),
        seq_lens=capture_lens,
        seq_lens_cpu=capture_lens.clone(),
        forward_mode=S.ForwardMode.TARGET_VERIFY,
        spec_info=None,
    )
    captured = backend.decode_cuda_graph_metadata[bs]
    ctx_ptr = captured.paged_mqa_ctx_lens_2d.data_ptr()
    sched_ptr = captured.paged_mqa_schedule_metadata.data_ptr()
    layout = captured.paged_mqa_layout
    if flip_env:
        monkeypatch.setenv(ENV, "1")
    lens = torch.tensor(replay_lens, dtype=torch.int64)
    backend._apply_cuda_graph_metadata(
        bs=bs,
        req_pool_indices=torch.arange(1, bs + 1),
        seq_lens=lens,
        seq_lens_cpu=lens.clone(),
        forward_mode=S.ForwardMode.TARGET_VERIFY,
        spec_info=None,
    )
    meta = backend.forward_metadata
    assert meta is captured
    assert meta.paged_mqa_layout is layout
    assert meta.paged_mqa_ctx_lens_2d.data_ptr() == ctx_ptr
    assert meta.paged_mqa_schedule_metadata.data_ptr() == sched_ptr
    return fake, meta


@pytest.mark.parametrize(
    "next_n,bs,layout",
    [(4, 8, "paired"), (2, 16, "native"), (4, 4, "per_token"), (6, 8, "paired")],
)
def test_cuda_graph_capture_and_replay(monkeypatch, next_n, bs, layout):
    layout = L(layout)
    S.set_arch(monkeypatch, "sm90")
    monkeypatch.delenv(ENV, raising=False)
    replay_lens = SEQ_LENS[:bs] + [5] * max(0, bs - len(SEQ_LENS))
    fake, meta = _capture_and_replay(monkeypatch, next_n, bs, replay_lens)
    assert meta.paged_mqa_layout is layout
    t = layout.tokens_per_row(next_n)
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (bs * next_n // t, t)
    assert meta.paged_mqa_ctx_lens_2d.reshape(-1).tolist() == S.expected_token_lengths(replay_lens, next_n)
    # replay rebuilt the schedule from the refreshed context lengths
    (sched_ctx, _, _), _ = fake.get_paged_mqa_logits_metadata.calls[-1]
    assert torch.equal(sched_ctx, meta.paged_mqa_ctx_lens_2d)


def test_replay_keeps_the_captured_layout(monkeypatch):
    S.set_arch(monkeypatch, "sm90")
    monkeypatch.delenv(ENV, raising=False)
    _, meta = _capture_and_replay(monkeypatch, 4, 8, SEQ_LENS[:8], flip_env=True)
    # the switch only applies to batch sizes captured after it was set
    assert meta.paged_mqa_layout is L("paired")
    assert tuple(meta.paged_mqa_ctx_lens_2d.shape) == (16, 2)
