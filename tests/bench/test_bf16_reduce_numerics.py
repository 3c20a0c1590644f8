"""bench/studies/bf16_reduce_numerics.py's emulation: bf16 rounding and one packed FMA against torch's bf16, and
float weights taking today's FP32 epilogue."""

from __future__ import annotations

import torch

from bench.studies import bf16_reduce_numerics as study


def test_rounding_to_bf16_is_torchs_from_float32():
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(1)) * 1e3
    assert torch.equal(study.round_bf16(x.double()), x.to(torch.bfloat16).double())
    halfway = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], dtype=torch.float64)  # ties go to the even one
    assert study.round_bf16(halfway).tolist() == [1.0, 1.0 + 2 * 2.0**-7]


def test_one_packed_fma_rounds_once_as_torchs_bf16_where_float32_holds_the_exact_sum():
    gen = torch.Generator().manual_seed(2)
    a, b, c = (torch.randn(100_000, generator=gen).to(torch.bfloat16) for _ in range(3))
    exact = a.double() * b.double() + c.double()
    in_float32 = a.float() * b.float() + c.float()  # exact product; the sum exact where float32 holds it
    held = in_float32.double() == exact
    assert held.float().mean() > 0.99
    torch_bf16 = in_float32.to(torch.bfloat16).double()
    assert torch.equal(study.round_bf16(exact)[held], torch_bf16[held])


def _request():
    gen = torch.Generator().manual_seed(3)
    q8, kv8, kv_scale, w = study.make_request(gen, 2, 64, 256)
    return study.accumulators(q8, kv8), w, kv_scale


def test_float_weights_take_the_fp32_epilogue_bit_for_bit_and_bf16_weights_the_bf16_reduce():
    acc, w, kv_scale = _request()
    assert torch.equal(study.kernel_logits(acc, w, kv_scale), study.fp32_epilogue(acc, w, kv_scale))
    bf16 = study.kernel_logits(acc, w.to(torch.bfloat16), kv_scale)
    assert torch.equal(bf16, study.bf16_reduce(acc, w.double(), kv_scale))
    assert not torch.equal(bf16, study.fp32_epilogue(acc, w, kv_scale))


def test_each_path_lies_within_its_bound_of_float64():
    acc, w, kv_scale = _request()
    ref = study.reference(acc, w, kv_scale)  # acc already FP32: the bound's first term is not needed here
    mag = study.magnitude(acc, w, kv_scale)
    paths = {
        "fp32": study.fp32_epilogue(acc, w, kv_scale),
        "bf16": study.bf16_reduce(acc, w, kv_scale),
        "mma": study.mma_reduce(acc, w, kv_scale),
    }
    for path, got in paths.items():
        assert ((got - ref).abs().amax(-1) <= study.bound("fp32" if path == "fp32" else "bf16", mag)).all(), path


def test_the_lane_layout_follows_the_wgmma_fragment():
    heads = torch.arange(64).view(1, 64)
    held = study.lanes(heads, 64)[0]  # [g, lane, p]
    assert held[1, 2, 1] == 8 * 1 + 2 * 2 + 1  # head (j / 4) * 8 + (lane % 4) * 2 + (j & 1) for j = 4 + 1
