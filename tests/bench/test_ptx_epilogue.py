"""bench/studies/ptx_epilogue.py on hand-written PTX: a stored logit's expression is its data flow, so
another instruction order or other register names give the same expression, another association does not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.studies import ptx_epilogue  # noqa: E402

WGMMA = "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%f1, %f2}, %rd1, %rd2, p, 1, 1;"


def _kernel(a: str, b: str, w: str, order: str) -> str:
    """acc[0] and acc[1] through ReLU, each times a weight from shared memory, then summed and stored."""
    relus = [f"max.f32 {a}, %f1, 0f00000000;", f"max.f32 {b}, %f2, 0f00000000;"]
    if order == "swapped":
        relus.reverse()
    return "\n".join(
        [
            WGMMA,
            f"ld.shared.v2.f32 {{{w}1, {w}2}}, [%r1];",
            *relus,
            f"mul.f32 %f20, {a}, {w}1;",
            f"fma.rn.f32 %f21, {b}, {w}2, %f20;",
            "st.global.f32 [%rd3], %f21;",
        ]
    )


def test_the_same_data_flow_is_the_same_expression_whatever_the_order_and_names():
    one = ptx_epilogue.expressions(_kernel("%f10", "%f11", "%w", "in order"))
    assert one == ["fma(max(acc[1], 0f00000000), ld0, mul(max(acc[0], 0f00000000), ld1))"]
    assert ptx_epilogue.expressions(_kernel("%f30", "%f31", "%v", "swapped")) == one


def test_another_association_is_another_expression():
    swapped_sum = _kernel("%f10", "%f11", "%w", "in order").replace(
        "mul.f32 %f20, %f10, %w1;\nfma.rn.f32 %f21, %f11, %w2, %f20;",
        "mul.f32 %f20, %f11, %w2;\nfma.rn.f32 %f21, %f10, %w1, %f20;",
    )
    assert ptx_epilogue.expressions(swapped_sum) != ptx_epilogue.expressions(_kernel("%f10", "%f11", "%w", "x"))
