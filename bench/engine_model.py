"""The DSA model sglang's engine loads for the engine benchmark: a ``config.json`` and nothing else.

No weights are downloaded (the engine runs with ``load_format="dummy"``: sglang fills every
parameter from a fixed seed, so two engines given the same folder hold the same weights) and
no tokenizer is needed (``skip_tokenizer_init``: requests carry input ids).

Per layer the shapes are DeepSeek-V3.2's (``DeepseekV32ForCausalLM``): hidden 7168, 128 heads,
q_lora 1536, kv_lora 512, qk rope 64 / nope 128, v 128, an indexer of 64 heads x 128 with
top-k 2048, YaRN as V3.2 ships it. What is smaller, and why:

- ``num_hidden_layers`` decoder layers (default 4) instead of 61: prefill time, not decode,
  limits a GPU call; every layer costs the same, so per-layer shares hold, but the fixed
  per-step costs (embedding, lm_head, sampling, the draft model) weigh more than in the real
  model, which makes the measured ratios conservative;
- every decoder layer's FFN is dense at V3's dense width (18432), standing in for one rank's
  FFN cost (V3.2 serves its MoE spread over many ranks);
- the NextN (MTP) layer: sglang always builds it as MoE; 32 routed experts (V3.2's 256 over
  8 expert-parallel ranks), 8 per token, groups sized so sglang's fused gate takes them;
- a 32000-token vocabulary instead of 129280 (the head is a per-step cost the real model
  spreads over 61 layers).

``index_share=True`` adds GLM-5's ``index_share_for_mtp_iteration`` flag, which sglang's EAGLE
worker reads from the draft model's config: draft steps share one indexer top-k.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

V32_ATTENTION = {
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    },
}
V3_DENSE_FFN_WIDTH = 18432
DRAFT_MOE = {
    "n_routed_experts": 32,
    "num_experts_per_tok": 8,
    "n_group": 4,
    "topk_group": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "moe_layer_freq": 1,
}
VOCAB_SIZE = 32000


def dsa_config(num_hidden_layers: int = 4, index_share: bool = False) -> dict:
    """config.json of the benchmark model (module docstring: what is V3.2's, what is not)."""
    if num_hidden_layers < 1:
        raise ValueError("the model needs at least one decoder layer")
    config = {
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
        "torch_dtype": "bfloat16",
        "num_hidden_layers": num_hidden_layers,
        "num_nextn_predict_layers": 1,
        # Every decoder layer dense; sglang builds the NextN layer as MoE regardless.
        "first_k_dense_replace": num_hidden_layers,
        "intermediate_size": V3_DENSE_FFN_WIDTH,
        "vocab_size": VOCAB_SIZE,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "initializer_range": 0.02,
        **V32_ATTENTION,
        **DRAFT_MOE,
    }
    if index_share:
        config["index_share_for_mtp_iteration"] = True
    return config


def param_counts(config: dict) -> dict[str, int]:
    """Parameters sglang builds from ``config``: the target (embedding, decoder layers, norm, head)
    and the NextN draft (its own embedding and head, which sglang swaps for the target's once
    loaded, its projections and one MoE decoder layer). tests/bench/engine_cpu_check.py counts
    both on sglang's own meta-device build."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    heads, q_lora, kv_lora = config["num_attention_heads"], config["q_lora_rank"], config["kv_lora_rank"]
    nope, rope, v = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    index_heads, index_dim = config["index_n_heads"], config["index_head_dim"]
    attention = (
        hidden * (q_lora + kv_lora + rope)  # fused q_a / kv_a projection
        + q_lora * heads * (nope + rope)
        + kv_lora * heads * (nope + v)
        + heads * v * hidden
        + q_lora
        + kv_lora  # q_a and kv_a norms
        + q_lora * index_heads * index_dim
        + hidden * index_dim
        + 2 * index_dim
        + hidden * index_heads  # indexer
    )
    dense_ffn = 3 * hidden * config["intermediate_size"]
    experts = config["n_routed_experts"] + config["n_shared_experts"]
    moe_ffn = 3 * hidden * config["moe_intermediate_size"] * experts + (hidden + 1) * config["n_routed_experts"]
    norms = 2 * hidden  # per decoder layer
    embed_and_head = 2 * vocab * hidden
    return {
        "target": embed_and_head + hidden + config["num_hidden_layers"] * (attention + dense_ffn + norms),
        "draft": embed_and_head + 2 * hidden + 2 * hidden * hidden + hidden + attention + moe_ffn + norms,
    }


def write_model(folder: Path, num_hidden_layers: int = 4, index_share: bool = False) -> Path:
    """Write the model folder (config.json only) and return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config_text(num_hidden_layers, index_share))
    return folder


def config_text(num_hidden_layers: int, index_share: bool) -> str:
    return json.dumps(dsa_config(num_hidden_layers, index_share), indent=2, sort_keys=True) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    ap.add_argument("--index-share", action="store_true", help="GLM-5's index_share_for_mtp_iteration")
    args = ap.parse_args(argv)
    config = Path(args.out) / "config.json"
    if config.exists() and config.read_text(errors="replace") != config_text(args.layers, args.index_share):
        raise SystemExit(f"{config} is not the config this script writes; choose another --out; nothing was changed")
    print(write_model(Path(args.out), args.layers, args.index_share))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
