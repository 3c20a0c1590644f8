"""On a CPU: does sglang accept the engine benchmark's model and arguments? (run as a script)

    python tests/bench/engine_cpu_check.py MODEL_DIR NEXT_N [KV_CACHE [GRID]] [+ MODEL_DIR NEXT_N ...]

Resolves ``ServerArgs`` from bench/engine/sizing.py's ``engine_args`` and builds both models sglang's
engine would build from that folder, on the meta device (shapes only, no memory): the target
``DeepseekV32ForCausalLM`` and the NextN draft ``DeepseekV3ForCausalLMNextN``. Prints one JSON
object per check, one a line; checks apart by `+` run one after the other in this one process, so
sglang and torch are imported once (each check's object is the same as in a process of its own:
compared when this was added). Stand-ins, only for what a CPU cannot answer: ``torch.cuda.get_device_capability``
returns (9, 0), the H200's SM90, where sglang asks which GPU it will run on; ``device="cpu"``
and ``SGLANG_USE_CPU_ENGINE=1`` let sglang build layers on this machine. Run in a process of its
own (the test does): sglang reads ``SGLANG_USE_CPU_ENGINE`` once, when its modules are imported.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "patched"), str(REPO)]
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
os.environ.setdefault("SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "0")

import cpu_sglang  # noqa: E402

cpu_sglang.install()

import torch  # noqa: E402

torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)

from bench.engine.grid import GRIDS  # noqa: E402
from bench.engine.sizing import KV_CACHES, engine_args, sizing_for  # noqa: E402


def main(model_dir: str, next_n: int, kv_cache: str = "bfloat16", grid: str = "full") -> dict:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.models.deepseek_nextn import DeepseekV3ForCausalLMNextN
    from sglang.srt.models.deepseek_v2 import DeepseekV32ForCausalLM
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs(
        **engine_args(Path(model_dir), next_n, sizing_for(GRIDS[grid], 48, 4), {**KV_CACHES[kv_cache], "device": "cpu"})
    )
    set_global_server_args_for_scheduler(args)
    cpu_sglang.init_single_rank_parallel()
    model_config = ModelConfig.from_server_args(args)
    initialize_dp_attention(args, model_config)
    hf = model_config.hf_config
    with torch.device("meta"):
        target = DeepseekV32ForCausalLM(hf, quant_config=None)
        draft = DeepseekV3ForCausalLMNextN(hf, quant_config=None)
    layer = target.model.layers[0]
    attn = layer.self_attn
    indexer = getattr(attn, "indexer", None)
    return {
        "server_args": {
            k: getattr(args, k)
            for k in (
                "page_size",
                "disable_overlap_schedule",
                "disable_radix_cache",
                "disable_cuda_graph",
                "speculative_algorithm",
                "speculative_num_steps",
                "speculative_num_draft_tokens",
                "speculative_eagle_topk",
                "speculative_draft_model_path",
                "dsa_prefill_backend",
                "dsa_decode_backend",
                "kv_cache_dtype",
                "cuda_graph_bs_decode",
                "max_running_requests",
                "context_length",
                "max_total_tokens",
            )
        },
        "index_share_for_mtp_iteration": bool(getattr(hf, "index_share_for_mtp_iteration", False)),
        "dsa_index_topk": getattr(hf, "index_topk", None),
        "target": {
            "class": type(target).__name__,
            "layers": len(target.model.layers),
            "mlp": [type(m.mlp).__name__ for m in target.model.layers],
            "ffn_width": layer.mlp.gate_up_proj.weight.shape[0] // 2,
            "attention": type(attn).__name__,
            "heads": attn.num_local_heads,
            "kv_lora_rank": attn.kv_lora_rank,
            "indexer_heads": getattr(indexer, "n_heads", None),
            "indexer_head_dim": getattr(indexer, "head_dim", None),
            "indexer_topk": getattr(indexer, "index_topk", None),
            "params": sum(p.numel() for p in target.parameters()),
        },
        "draft": {
            "class": type(draft).__name__,
            "mlp": type(draft.model.decoder.mlp).__name__,
            "experts": getattr(draft.model.decoder.mlp, "n_routed_experts", None)
            or getattr(getattr(draft.model.decoder.mlp, "config", None), "n_routed_experts", None),
            "params": sum(p.numel() for p in draft.parameters()),
        },
    }


if __name__ == "__main__":
    checks, args = [[]], sys.argv[1:]
    for arg in args:
        if arg == "+":
            checks.append([])
        else:
            checks[-1].append(arg)
    for model_dir, next_n, *rest in checks:
        print(json.dumps(main(model_dir, int(next_n), *rest[:2]), default=str))
