#!/usr/bin/env python3
"""Compile, in parallel and ahead of the timed runs, the DeepGEMM kernels the indexer grids need.

DeepGEMM JIT-compiles its paged-MQA kernels on first use and caches them in $DG_JIT_CACHE_DIR: one
logits kernel per tokens-per-row (1, 2) and one schedule-metadata kernel per batch size aligned to
32 rows. A grid of many batch sizes would otherwise compile them one after another inside the timed
processes. This script compiles every aligned row count up to --max-rows, --jobs processes at a time
(each imports torch and deep_gemm once), so that both series lines' runs find them cached.

    python ci/warm_deepgemm_jit.py --max-rows 768 --jobs 8

Prints what it compiled and how long it took; exits 0 when every job finished (a failure of one job
is reported and does not stop the others).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

ALIGN = 32
CHILD = r"""
import sys, torch, deep_gemm
rows = [int(r) for r in sys.argv[1].split(",")]
sms = deep_gemm.get_num_sms()
for r in rows:
    for tokens in (1, 2):
        deep_gemm.get_paged_mqa_logits_metadata(torch.ones((r, tokens), dtype=torch.int32, device="cuda"), 64, sms)
if sys.argv[2] == "1":  # the two logits kernels: one query token per row and two
    heads, dim, page = 64, 128, 64
    kv = torch.zeros((2, page, 1, dim + 4), dtype=torch.uint8, device="cuda")
    table = torch.zeros((1, 2), dtype=torch.int32, device="cuda")
    for tokens in (1, 2):
        q = torch.zeros((1, tokens, heads, dim), device="cuda").to(torch.float8_e4m3fn)
        w = torch.zeros((tokens, heads), dtype=torch.float32, device="cuda")
        ctx = torch.full((1, tokens), page, dtype=torch.int32, device="cuda")
        sched = deep_gemm.get_paged_mqa_logits_metadata(ctx, 64, sms)
        deep_gemm.fp8_paged_mqa_logits(q, kv, w, ctx, table, sched, 2 * page, clean_logits=False)
torch.cuda.synchronize()
print("compiled", rows)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-rows", type=int, default=768, help="largest kernel row count the grids use")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per job")
    args = ap.parse_args(argv)
    sizes = list(range(ALIGN, args.max_rows + ALIGN, ALIGN))
    shares = [sizes[i :: args.jobs] for i in range(args.jobs) if sizes[i :: args.jobs]]
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, ",".join(map(str, share)), "1" if i == 0 else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, share in enumerate(shares)
    ]
    failed = 0
    for proc, share in zip(procs, shares, strict=True):
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            failed += 1
            tail = (out.strip().splitlines() or ["no output"])[-1]
            print(f"[warm-deepgemm] rows {share[0]}..{share[-1]}: exit {proc.returncode}: {tail}", flush=True)
    print(
        f"[warm-deepgemm] {len(sizes)} aligned row counts x 2 widths over {len(shares)} jobs "
        f"in {time.time() - t0:.1f} s; {failed} job(s) failed",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
