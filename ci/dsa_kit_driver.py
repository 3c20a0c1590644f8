#!/usr/bin/env python3
"""Drive sglang's own DSA attention test kit (sglang/test/kits/attention_unittest) as pytest tests.

One pytest test per kit case or implementation variant, so a junit report names each one.
Run it through the CLI (ci/dsa_kit_cli.py), which also writes a JSON summary:

  python ci/dsa_kit_driver.py --junit OUT.xml --summary OUT.json [--expect auto|pristine|patched|none]
      [--label NAME] [--command "how this was started"] [--patches-record applied.json] [-- PYTEST ARGS]

or plainly with `pytest ci/dsa_kit_driver.py` (no summary then).  It needs sglang, sgl_kernel,
deep_gemm and a CUDA GPU on the path; see ci/run_dsa_kit.sh for the air-gapped box.
TARGET_VERIFY tests assert the paged-MQA layout the DSA metadata names (ci/dsa_kit_layouts.py)
against the layout expected for the GPU and tree.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import unittest
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "scripts")]  # its sibling modules and the toolkit, however loaded

from dsa_kit_layouts import FORCE_PER_TOKEN_ENV, RECORDER, allowed_layouts  # noqa: E402

from sglpatch.gpu.gpu_environment import fa3_in_kernel_package  # noqa: E402

# ---------------------------------------------------------------------------
# Case table (shapes follow upstream's test_dsa.py for the same kit entry points)
# ---------------------------------------------------------------------------
HEADS = 4
PAGE = 64

# run_dsa_sparse_attention_case over the kit's own make_dsa_sparse_cases("dsa")
# (names are read from the kit at run time; listed here so collection needs no GPU)
SPARSE_CASE_NAMES = (
    "dsa_sparse_prefill_flashmla_sparse_topk",
    "dsa_sparse_prefill_long_extend",
    "dsa_sparse_prefill_multi_request",
    "dsa_sparse_decode_flashmla_kv_topk",
    "dsa_sparse_decode_short_prefix_padding",
    "dsa_sparse_decode_ragged_prefix",
    "dsa_sparse_decode_long_prefix",
)
# TARGET_VERIFY: (prefix_lens, next_n).  next_n = draft tokens per request = extend length.
TARGET_VERIFY_CASES = (((128,), 2), ((128,), 3), ((128,), 4))
# Not in upstream's file (run after the upstream-shaped cases so a failure cannot spoil them):
# two requests, and eight requests -- the series leaves per-token on SM90 only above a floor of
# two-token rows (16: next_n 4 at 8 requests; next_n 2 needs 16), so bs8 is where paired can run.
TARGET_VERIFY_BS2_CASES = (((128, 192), 2), ((128, 192), 3), ((128, 192), 4))
BS8_PREFIX = (64, 96, 128, 150, 192, 200, 230, 256)
TARGET_VERIFY_BS8_CASES = ((BS8_PREFIX, 2), (BS8_PREFIX, 3), (BS8_PREFIX, 4))
DECODE_IMPLS = ("flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "trtllm", "aiter")


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kit():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDA is required")
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods import dsa_attention as dsa
    from sglang.test.kits.attention_unittest.runner_modes import (
        cuda_graph_decode_runner as cg,
    )
    from sglang.test.kits.attention_unittest.runner_modes import (
        speculative_draft_runner as draft,
    )

    RECORDER.install()
    return dict(dsa=dsa, cg=cg, draft=draft, ForwardMode=ForwardMode, torch=torch)


@pytest.fixture
def tc(request):
    """A unittest.TestCase the kit can call skipTest/assert* on; SkipTest becomes a pytest skip."""
    RECORDER.current = request.node.nodeid
    yield unittest.TestCase()
    RECORDER.current = None


def _case(kit, name, mode, prefix_lens, extend_lens=()):
    return kit["dsa"].DSAAttentionCase(
        name=name,
        backend="dsa",
        forward_mode=getattr(kit["ForwardMode"], mode),
        num_heads=HEADS,
        num_kv_heads=1,
        page_size=PAGE,
        prefix_lens=tuple(prefix_lens),
        extend_lens=tuple(extend_lens),
    )


def _tree() -> str:
    return os.environ.get("DSA_KIT_EXPECT", "none")


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPARSE_CASE_NAMES)
def test_sparse_case(kit, tc, name):
    cases = {c.name: c for c in kit["dsa"].make_dsa_sparse_cases("dsa")}
    if name not in cases:
        pytest.fail(f"kit has no sparse case {name}; it has {sorted(cases)}")
    kit["dsa"].run_dsa_sparse_attention_case(tc, cases[name])


def _run_target_verify(kit, tc, request, prefix_lens, next_n):
    case = _case(
        kit,
        f"dsa_sparse_target_verify_bs{len(prefix_lens)}_n{next_n}",
        "TARGET_VERIFY",
        prefix_lens,
        (next_n,) * len(prefix_lens),
    )
    kit["dsa"].run_dsa_sparse_speculative_forward_mode_case(tc, case)
    recs = [r for r in RECORDER.records.get(request.node.nodeid, []) if r.get("forward_mode") == "TARGET_VERIFY"]
    assert recs, "the DSA backend built no TARGET_VERIFY metadata (layout recorder saw nothing)"
    major = kit["torch"].cuda.get_device_capability(0)[0]
    allowed = allowed_layouts(next_n, major, _tree())
    want = ",".join(sorted(allowed)) if allowed else None
    for r in recs:
        r["expected"] = want
    seen_field = {r["field_layout"] for r in recs}
    seen_inferred = {r["inferred"] for r in recs}
    # shown in the junit report as <property> entries of this test case
    for key, value in (
        ("paged_mqa_layout_allowed", want),
        ("paged_mqa_layout_field", ",".join(sorted(map(str, seen_field)))),
        ("paged_mqa_layout_inferred", ",".join(sorted(map(str, seen_inferred)))),
        ("paged_mqa_ctx_lens_2d_shapes", str([r["ctx_lens_2d_shape"] for r in recs])),
    ):
        request.node.user_properties.append((key, str(value)))
    # the v0.5.14 line names the layout in a metadata field; v0.5.23's reads it from the lengths' shape only
    if _tree() == "patched" and os.environ.get("DSA_KIT_LAYOUT_FIELD", "1") == "1":
        assert seen_field != {None}, (
            "patched tree expected, but the DSA metadata carries no layout field "
            f"(fields named *layout* seen: {sorted(RECORDER.field_names)})"
        )
        for r in recs:  # the named layout and the context lengths built for it agree
            assert r["field_layout"] == r["inferred"], (
                f"layout field says {r['field_layout']} but the 2D context lengths "
                f"(shape {r['ctx_lens_2d_shape']}) imply {r['inferred']}"
            )
    if allowed is not None:
        if seen_field != {None}:
            assert seen_field <= allowed, f"layout field says {seen_field}, allowed {allowed}"
        assert seen_inferred <= allowed, (
            f"2D context lengths imply {seen_inferred} "
            f"(shapes {[r['ctx_lens_2d_shape'] for r in recs]}), allowed {allowed}"
        )


def _ids(cases):
    return [f"bs{len(p)}-next_n{n}" for p, n in cases]


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_CASES, ids=_ids(TARGET_VERIFY_CASES))
def test_target_verify(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


def test_draft_extend_v2(kit, tc):
    case = _case(kit, "dsa_sparse_draft_extend_v2", "DRAFT_EXTEND_V2", (128,), (3,))
    kit["dsa"].run_dsa_sparse_speculative_forward_mode_case(tc, case)


@pytest.mark.parametrize("impl", DECODE_IMPLS)
def test_decode_impl_variant(kit, tc, impl):
    if impl == "fa3" and not fa3_in_kernel_package():
        pytest.skip("fa3: FA3 kernels (sgl_kernel/flash_ops.abi3.so, 1.7 GB) are not in the bundle")
    if impl == "tilelang" and importlib.util.find_spec("tilelang") is None:
        pytest.skip("tilelang: the tilelang package is not installed on this box")
    major, minor = kit["torch"].cuda.get_device_capability(0)
    if impl == "trtllm" and (major, minor) != (10, 0):
        pytest.skip(f"trtllm: needs SM100 (B200); this GPU is SM{major}{minor}")
    if impl == "aiter" and kit["torch"].version.hip is None:
        pytest.skip("aiter: HIP/AMD only")
    case = _case(kit, "dsa_sparse_decode_impl_variant", "DECODE", (128,))
    kit["dsa"].run_dsa_sparse_decode_impl_variant_case(tc, case, impl)


def test_cuda_graph_decode(kit, tc):
    case = _case(kit, "runner_cuda_graph_dsa_sparse_decode_flashmla_kv", "DECODE", (127, 128))
    kit["cg"].run_dsa_sparse_cuda_graph_decode_case(tc, case)


def test_eagle_draft_cuda_graph_runner(kit, tc):
    case = _case(kit, "runner_eagle_draft_decode_cuda_graph_dsa_chain", "DECODE", (128, 192))
    kit["draft"].run_dsa_eagle_draft_cuda_graph_runner_case(tc, case)


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_BS2_CASES, ids=_ids(TARGET_VERIFY_BS2_CASES))
def test_target_verify_two_requests(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_BS8_CASES, ids=_ids(TARGET_VERIFY_BS8_CASES))
def test_target_verify_eight_requests(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


@pytest.mark.parametrize("next_n", (2, 4), ids=lambda n: f"bs8-next_n{n}")
def test_target_verify_forced_per_token(kit, tc, request, monkeypatch, next_n):
    monkeypatch.setenv(FORCE_PER_TOKEN_ENV, "1")
    _run_target_verify(kit, tc, request, BS8_PREFIX, next_n)


if __name__ == "__main__":
    from dsa_kit_cli import main

    sys.exit(main())
