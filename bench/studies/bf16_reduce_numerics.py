"""How the sixth design's bf16 reduce over heads moves the SM90 paged-MQA logits and their top-k (CPU, torch).

Inputs as DeepGEMM's `test_paged_mqa_logits` and sglang make them: q ~ N(0, 1) quantized per token and head to
fp8-e4m3 with a power-of-two scale (sglang's act_quant, scale_fmt ue8m0), KV ~ N(0, 1) quantized per token to
fp8-e4m3 with scale amax / 448 (the test's kv_cache_cast_to_fp8), head weights as sglang's indexer scales them
(`weights_proj(x) * n_heads**-0.5 * q_scale * softmax_scale`, the projection's output drawn N(0, 1) as the
project's indexer fixture does). The WGMMA's accumulator is taken as the exact fp8 dot product rounded to FP32
(the hardware's FP8 accumulation, not modelled, feeds both epilogues alike). Logits per row (a query token):

  fp32    today's epilogue, in the kernel's order: per lane (lane % 4) two chains, even and odd heads, over the
          8 head groups (FMUL, then FFMA), their sum times the KV scale, then the butterfly over the four lanes;
  fp32-bw the same with the weights rounded to bf16 (what a caller passing bf16 weights changes by itself);
  bf16    the candidate: ReLU and pack to bf16 (RNE), bf16x2 FMAs with bf16 weights (one rounding each, HMUL2
          first), the pair's two bf16 sums added in FP32, times the KV scale, the same butterfly;
  mma     route (B), not built: the same bf16 ReLU and weights, the sum over heads on the tensor core
          (mma.m16n8k16, FP32 accumulate), approximated as each 16-head k-step's exact sum added to the FP32
          accumulator with one rounding (the tensor core's internal order and rounding are not modelled);
  fp64    the reference: float64 from the same fp8 bytes and the float weights.

Near-ties: a top-k set difference is counted as one when the reference logit of the position lies within 2 x D of
the reference's k-th largest, D being the row's largest rounding bound of the compared path: for bf16
(2 + 8 + 1) x 2^-9 x scale x sum_h |relu(acc_h) w_h| (ReLU's and the weight's roundings, 8 FMA roundings in a
chain, the FP32 tail below one bf16 unit), for fp32 (1 + 8 + 4) x 2^-24 x the same (the accumulator's rounding
to FP32, the chain, the tail). A difference beyond that bound would mean the emulation or the bound is wrong. The
bound is loose (weights of both signs make sum_h |relu(acc_h) w_h| larger than the logit), so each line also gives
the largest distance of a differing position's reference logit from the k-th, over the row's largest logit.

    python bench/studies/bf16_reduce_numerics.py --ctx 4096 16384 65536 --requests 4 --next-n 4 --heads 64
"""

from __future__ import annotations

import argparse
import math

import torch

HEAD_DIM = 128
FP8_MAX = 448.0
LANES, PAIR = 4, 2  # a thread holds heads 8g + 2 * lane + p: g < heads / 8, lane < 4, p < 2
BF16_U, FP32_U = 2.0**-9, 2.0**-24


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """float64 x rounded to the nearest bf16 (8 significant bits), ties to even; once, from float64."""
    mantissa, exponent = torch.frexp(x)
    return torch.ldexp(torch.round(torch.ldexp(mantissa, torch.tensor(8))), exponent - 8)


def round_fp32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32).to(torch.float64)


def fp8(x: torch.Tensor) -> torch.Tensor:
    """x (float) through fp8-e4m3 and back, as float64."""
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def make_request(gen, next_n: int, heads: int, ctx: int):
    """fp8 q [T, H, D] and kv [N, D] as values, kv scales [N], float weights [T, H]."""
    q = torch.randn(next_n, heads, HEAD_DIM, generator=gen)
    q_scale = torch.exp2(torch.ceil(torch.log2(q.abs().amax(-1).clamp(min=1e-4) / FP8_MAX)))
    q8 = fp8(q / q_scale.unsqueeze(-1))
    kv = torch.randn(ctx, HEAD_DIM, generator=gen).to(torch.bfloat16).float()
    kv_scale = kv.abs().amax(-1, keepdim=True).clamp(min=1e-4) / FP8_MAX
    kv8 = fp8(kv * (1.0 / kv_scale))
    w = torch.randn(next_n, heads, generator=gen) * heads**-0.5 * q_scale * HEAD_DIM**-0.5
    return q8, kv8, kv_scale.squeeze(-1).double(), w.float()


def accumulators(q8, kv8) -> torch.Tensor:
    """The exact fp8 dot products [T, H, N] (float64 holds them exactly), rounded to FP32."""
    return round_fp32(torch.einsum("thd,nd->thn", q8, kv8))


def lanes(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[T, H, ...] -> [T, G, LANES, PAIR, ...]: a thread's heads, grouped as the WGMMA fragment holds them."""
    return x.reshape(x.shape[0], heads // 8, LANES, PAIR, *x.shape[2:])


def butterfly(v: torch.Tensor) -> torch.Tensor:
    """The two xor-shuffle steps over the four lanes (dim 1), in FP32: (v0 + v1) + (v2 + v3)."""
    return round_fp32(round_fp32(v[:, 0] + v[:, 1]) + round_fp32(v[:, 2] + v[:, 3]))


def fp32_epilogue(acc: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    """Today's kernel: max, then FMUL for the first head group and FFMA (one rounding) for the others."""
    return _chained(acc, w, kv_scale, lambda x: x, round_fp32)


def bf16_reduce(acc: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    """The candidate: cvt.rn.relu.bf16x2.f32, HMUL2 then HFMA2 (each lane one rounding to bf16), FP32 tail."""
    return _chained(acc, w, kv_scale, round_bf16, round_bf16)


def _chained(acc, w, kv_scale, round_inputs, round_step) -> torch.Tensor:
    """ReLU(acc) times the weights summed over head groups in one chain a lane (its inputs and each step rounded
    as given), then the two halves, the KV scale and the cross-lane sum in FP32."""
    heads = acc.shape[1]
    relu = lanes(round_inputs(acc.clamp(min=0)), heads)
    weight = lanes(round_inputs(w.double()), heads).unsqueeze(-1)
    chain = round_step(relu[:, 0] * weight[:, 0])
    for g in range(1, heads // 8):
        chain = round_step(relu[:, g] * weight[:, g] + chain)
    per_lane = round_fp32(round_fp32(chain[:, :, 0] + chain[:, :, 1]) * kv_scale)
    return butterfly(per_lane)


def mma_reduce(acc: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    """Route (B), approximated: bf16 products summed 16 heads a k-step, each step rounded once to FP32."""
    products = round_bf16(acc.clamp(min=0)) * round_bf16(w.double()).unsqueeze(-1)  # exact in float64
    steps = products.reshape(acc.shape[0], acc.shape[1] // 16, 16, acc.shape[2]).sum(2)
    total = torch.zeros_like(steps[:, 0])
    for k in range(steps.shape[1]):
        total = round_fp32(total + steps[:, k])
    return round_fp32(total * kv_scale)


def kernel_logits(acc: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    """What the candidate kernel computes for weights of w's dtype: float keeps today's epilogue."""
    if w.dtype == torch.bfloat16:
        return bf16_reduce(acc, w.double(), kv_scale)
    return fp32_epilogue(acc, w, kv_scale)


def reference(acc_exact: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    return torch.einsum("thn,th->tn", acc_exact.clamp(min=0), w.double()) * kv_scale


def magnitude(acc: torch.Tensor, w: torch.Tensor, kv_scale: torch.Tensor) -> torch.Tensor:
    """sum_h |relu(acc_h) w_h| x scale per logit: what the rounding bounds scale with."""
    return torch.einsum("thn,th->tn", acc.clamp(min=0), w.double().abs()) * kv_scale


def bound(path: str, mag: torch.Tensor) -> torch.Tensor:
    """Each row's largest rounding bound of `path` against float64 (module docstring)."""
    factor = (2 + 8 + 1) * BF16_U if path == "bf16" else (1 + 8 + 4) * FP32_U
    return factor * mag.amax(-1)


def topk_diff(got: torch.Tensor, ref: torch.Tensor, slack: torch.Tensor, k: int) -> tuple[int, int, float]:
    """(positions in one top-k and not the other, of them near-ties: |ref - ref's k-th| <= slack), summed over
    rows, and the largest |ref - ref's k-th| / the row's largest |ref| among those positions."""
    diffs = ties = 0
    gap = 0.0
    for row in range(got.shape[0]):
        kk = min(k, got.shape[1])
        mine = set(torch.topk(got[row], kk).indices.tolist())
        theirs = set(torch.topk(ref[row], kk).indices.tolist())
        kth = torch.topk(ref[row], kk).values[-1]
        swapped = torch.tensor(sorted(mine ^ theirs), dtype=torch.long)
        diffs += len(swapped)
        if len(swapped):
            distance = (ref[row, swapped] - kth).abs()
            ties += int((distance <= slack[row]).sum())
            gap = max(gap, float(distance.max() / ref[row].abs().max()))
    return diffs, ties, gap


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest |got - ref| over the row's largest |ref|, over rows."""
    return float(((got - ref).abs().amax(-1) / ref.abs().amax(-1)).max())


def study_ctx(gen, ctx: int, args) -> dict:
    rows = {name: [] for name in ("fp32", "fp32-bw", "bf16", "mma", "fp64", "mag")}
    for _ in range(args.requests):
        q8, kv8, kv_scale, w = make_request(gen, args.next_n, args.heads, ctx)
        exact = torch.einsum("thd,nd->thn", q8, kv8)
        acc = round_fp32(exact)
        rows["fp32"].append(kernel_logits(acc, w, kv_scale))
        rows["fp32-bw"].append(fp32_epilogue(acc, w.to(torch.bfloat16).float(), kv_scale))
        rows["bf16"].append(kernel_logits(acc, w.to(torch.bfloat16), kv_scale))
        rows["mma"].append(mma_reduce(acc, w, kv_scale))
        rows["fp64"].append(reference(exact, w, kv_scale))
        rows["mag"].append(magnitude(exact, w, kv_scale))
    return {name: torch.cat(parts) for name, parts in rows.items()}


def describe(ctx: int, r: dict, k: int) -> list[str]:
    b16, b32 = bound("bf16", r["mag"]), bound("fp32", r["mag"])
    lines = [f"ctx {ctx}: {r['fp64'].shape[0]} rows"]
    for name, slack in (("fp32", 2 * b32), ("fp32-bw", 2 * b16), ("bf16", 2 * b16), ("mma", 2 * b16)):
        lines.append(_line(name, "fp64", r[name], r["fp64"], slack, k))
    lines.append(_line("bf16", "fp32", r["bf16"], r["fp32"], 2 * (b16 + b32), k))
    rel_bound = float((b16 / r["fp64"].abs().amax(-1)).max())
    lines.append(f"  bf16 bound D / row max (largest row): {rel_bound:.2e}")
    return lines


def _line(name: str, against: str, got, ref, slack, k: int) -> str:
    diffs, ties, gap = topk_diff(got, ref, slack, k)
    return (
        f"  {name:8s} vs {against}: largest error / row max {relative_error(got, ref):.2e}; top-{k} positions "
        f"differing {diffs} (a swap is two), near-ties {ties}, farthest from the k-th {gap:.1e} of row max"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ctx", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--next-n", type=int, default=4)
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    assert args.heads % 8 == 0 and math.log2(HEAD_DIM).is_integer()
    gen = torch.Generator().manual_seed(args.seed)
    print(f"{args.heads} heads, next_n {args.next_n}, {args.requests} requests per context, top-{args.topk}")
    for ctx in args.ctx:
        print("\n".join(describe(ctx, study_ctx(gen, ctx, args), args.topk)), flush=True)


if __name__ == "__main__":
    main()
