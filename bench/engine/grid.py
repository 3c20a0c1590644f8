"""The engine benchmark's grids: cases of requests x context x lengths, and the prompt pool they share.

A case of N requests asks prefixes of pool prompts 0..N-1; each engine prefills every pool prompt a
grid asks for once, to the longest prefix any case asks of it, so that sglang's radix cache serves
every case's prompts and a case costs its decode only. No two requests share a prefix.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

POOL_PROMPTS = 128  # distinct prompts; a case of N requests asks prefixes of prompts 0..N-1
MAX_CTX = 131072
WARMUP_PROMPT = (1000, 1024)

# (batch size, context, lengths): at most POOL_PROMPTS requests of at most MAX_CTX tokens.
GRIDS = {
    # 1 to 64 requests at 4k and 16k, ragged 16k, and 64k at 8 and 32
    "full": [(bs, ctx, "uniform") for ctx in (4096, 16384) for bs in (1, 8, 32, 64)]
    + [(64, 16384, "ragged"), (8, 65536, "uniform"), (32, 65536, "uniform"), (32, 65536, "ragged")],
    # The targets (32 requests x 64k) and two 16k points, from 32 pool prompts of 64k only.
    "targets": [
        (8, 16384, "uniform"),
        (32, 16384, "uniform"),
        (32, 65536, "uniform"),
        (32, 65536, "ragged"),
    ],
    "targets64k": [(32, 65536, "uniform"), (32, 65536, "ragged")],
    # What a server sees at its target sizes: 32 x 64k (uniform, ragged) and 64 x 16k.
    "deploy": [(32, 65536, "uniform"), (32, 65536, "ragged"), (64, 16384, "uniform")],
    "probe": [(8, 4096, "uniform")],
    # The ends of the 1-64 request range at 4k and 64k, beside the targets' 32 x 64k.
    "sizes": [(1, 4096, "uniform"), (16, 4096, "uniform"), (1, 65536, "uniform"), (16, 65536, "uniform")],
    # Many requests: 64 and 128 at 16k (2M pool tokens per engine, what one call has time to prefill).
    "wide": [(64, 16384, "uniform"), (128, 16384, "uniform")],
    # 128 requests at 16k beside the longest context, 8 x 128k (3M pool tokens per engine).
    "wide_long": [(128, 16384, "uniform"), (8, 131072, "uniform")],
    # The longest context alone, 8 x 128k (three engines' 128k prefills together overran the H200 at
    # 16k chunks beside wide's pool: results/engine_h200_tpot_wide_long_oom.json).
    "long": [(8, 131072, "uniform")],
    # 64 requests at the targets' 64k (4.2M pool tokens per engine: a call of its own).
    "targets64k_wide": [(64, 65536, "uniform")],
    # Issue 47's Required 4 (the patched engine's draft-extend host time at 1-128 requests x 4k-128k) at the
    # sizes whose pools two engines cannot prefill in one call (~42k tokens/s per engine): for --patched-only,
    # one engine. wide64k: 8.4M pool tokens per engine (128 prompts of 64k; 64 x 64k reads the first 64),
    # 8.5M KV tokens asked; wide128k: 4.2M (32 prompts of 128k), 4.3M asked. --check-memory with one engine
    # (--kv-cache fp8_e4m3 --engine-arg sleep_on_idle=true, next_n 4): wide64k 68.1 GiB at 16k chunks, which
    # fits the H200 (139.8) and the H100 (79.2, by 11.1: tight, so a note and the indexer's logits held to the
    # room), 47.1 at chunked_prefill_size=2048; wide128k 51.6 at 16k chunks, 30.6 at 2048, fitting either
    # card. Two engines do not fit the H100 (136.1 and 103.1 GiB at 16k chunks).
    "wide64k": [(64, 65536, "uniform"), (128, 65536, "uniform")],
    "wide128k": [(16, 131072, "uniform"), (32, 131072, "uniform")],
    # 64 x 128k, the same 8.4M pool tokens as wide64k (64 prompts of 128k), one engine of it alone.
    "wide128k_64": [(64, 131072, "uniform")],
    # Issue 46, the one-call patch at next_n 3 (one token per row): 288 and 192 rows, above 132, and 144.
    "one_call": [(96, 16384, "uniform"), (64, 32768, "ragged"), (48, 16384, "uniform")],
    # one_call's 16k cases alone (1.6M pool tokens per engine: three engines fit where one_call's 64 x 32k did not)
    "one_call_16k": [(96, 16384, "uniform"), (48, 16384, "uniform")],
    # The same at next_n 4 with two-token rows: 256 rows (above 132) and 128 (below).
    "one_call_pairs": [(128, 16384, "uniform"), (64, 16384, "uniform")],
    # Every draft position compared (issue 47): one request, and ragged 16k batches of 16 and of 40, which
    # replays the graphs of 48 padded (0.5M pool tokens per engine, beside the IndexShare case's engines).
    "drafts": [(1, 4096, "uniform"), (16, 16384, "ragged"), (40, 16384, "ragged")],
    # The two-process floor at 32 x 64k (issue 47): one case, for as many short runs as a call holds, since
    # each run draws its own host speed and the floor tightens with the runs, not with their length.
    "floor64k": [(32, 65536, "uniform")],
}


@dataclass
class Case:
    batch_size: int
    ctx: int
    lengths: str
    new_tokens: int

    @property
    def name(self) -> str:
        return f"bs{self.batch_size}-ctx{self.ctx // 1024}k-{self.lengths}"

    def requests(self, top_logprobs: bool = False) -> list[dict]:
        if self.batch_size > POOL_PROMPTS or self.ctx > MAX_CTX:
            raise ValueError(f"{self.name}: the prompt pool holds {POOL_PROMPTS} prompts of at most {MAX_CTX} tokens")
        rng = random.Random(f"{self.batch_size}-{self.ctx}-{self.lengths}")
        out = []
        for index in range(self.batch_size):
            length = self.ctx if self.lengths == "uniform" else rng.randint(self.ctx // 2, self.ctx)
            out.append({"prompt": [index, length], "max_new_tokens": self.new_tokens, "top_logprobs": top_logprobs})
        return out


def pool_for(cases: list) -> list[dict]:
    """The prefill requests of the pool prompts these cases ask prefixes of, each to the longest prefix
    any case asks of it (a shorter one is then served by the radix cache)."""
    longest: dict[int, int] = {}
    for spec in cases:
        for r in Case(*spec, 1).requests():
            index, length = r["prompt"]
            longest[index] = max(length, longest.get(index, 0))
    return [{"prompt": [i, n], "max_new_tokens": 1} for i, n in sorted(longest.items())]
