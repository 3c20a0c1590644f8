#!/usr/bin/env python3
"""Patch 3 on a GPU: the patched EAGLE draft CUDA-graph runner with IndexShare and a top-k seed.

Runs in its own process (``test_seed_draft_loop.py`` starts it) because it imports one sglang
tree for real.  Everything is sglang's own code except the draft model's forward:

- sglang's DSA test kit builds the DSA fixture (mock model runner, real ``ReqToTokenPool`` /
  ``DSATokenToKVPool``, the kit's projected sparse-attention module with FlashMLA behind a real
  ``DeepseekSparseAttnBackend``), configures the runner for EAGLE chain drafting, builds the
  draft attention backends with ``DraftBackendFactory`` and the draft worker harness that binds
  the real ``EagleDraftWorker.draft_forward``;
- the worker's IndexShare state comes from the patched
  ``EagleDraftWorker._init_dsa_index_share_state`` (hf_config ``index_share_for_mtp_iteration``
  and ``index_topk``);
- the real ``EAGLEDraftCudaGraphRunner`` captures, decides (``can_run_graph``) and replays
  (``execute``); a batch it refuses runs the kit's eager ``draft_forward`` path, as
  ``EagleDraftWorker.draft`` does;
- the draft model forward (ours, below) does what DeepseekModelNextN does with the shared
  top-k: take ``spec_info.dsa_topk_indices`` when ``forward_batch.reuse_dsa_topk_indices`` is
  set and it is not None, else run the real ``Indexer._get_topk_paged`` (DeepGEMM + fused top-k
  transform) on the draft step's metadata, and hand the result back through
  ``spec_info.dsa_topk_indices``. It feeds that top-k to the kit's sparse attention and
  records, inside the graph, which top-k each draft step used.

Checks (each written to the JSON with its evidence; exit 1 if any fails):
- the runner captured one graph per batch size, whose step 0 read the static seed buffer (no
  indexer pass while capturing);
- ``can_run_graph`` takes a seeded batch and refuses an unseeded one, so only seeded batches
  replay (the unseeded one never reaches ``execute``);
- seeded replay: draft steps 0 and 1 used exactly the seed (and a second seed on a second replay);
  seeds are the slots of positions 0..2047 and 500..2547, not what the indexer picks;
- the unseeded batch's eager loop: step 0 ran the indexer (its top-k equal as sets to the eager
  reference's, unlike the seed), and step 1 reused it;
- graph outputs equal the eager ``draft_forward`` outputs (kit tolerance) for both seeds, and
  the unseeded fallback equals the eager reference.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
# Run as a script (a child process of test_seed_draft_loop.py): the repo root goes on the path, as pytest's
# `pythonpath = ["."]` puts it for the tests, so `bench` is imported as the package it is.
sys.path.insert(0, str(REPO))

from bench.indexer import fixture as ix  # noqa: E402

# index_topk 2048 (DeepSeek-V3.2's; sgl-kernel's fused top-k transform takes no other), and
# prefixes longer than that, so the top-k is a choice.
INDEX_TOPK = 2048
PREFIX_LENS = (3000, 4000)
NUM_STEPS = 3  # draft forwards at steps 0 and 1; step 1 reuses step 0's top-k
MAX_CONTEXT = 4160


class SharedTopkDraftForward:
    """The draft model's forward for this test (see the module docstring)."""

    def __init__(self, torch, kit_forward, indexer, q_fp8, weights, max_bs, index_topk, device):
        self.torch = torch
        self.kit = kit_forward  # the kit's draft forward object: embeddings, lm_head, attention module
        self.indexer = indexer
        self.q_fp8, self.weights = q_fp8, weights
        self.n_forward = NUM_STEPS - 1
        self.record = torch.full((self.n_forward, max_bs, index_topk), -2, dtype=torch.int32, device=device)
        self.calls = 0
        self.trace = []  # host side, per forward: (step, seed given, indexer ran)

    def __call__(self, forward_batch):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.forward_context import get_attn_backend

        step = self.calls % self.n_forward
        self.calls += 1
        spec_info = forward_batch.spec_info
        shared = spec_info.dsa_topk_indices if forward_batch.reuse_dsa_topk_indices else None
        bs = forward_batch.batch_size
        if shared is None:
            metadata = get_attn_backend().get_indexer_metadata(0, forward_batch)
            topk = self.indexer._get_topk_paged(forward_batch, 0, self.q_fp8[:bs], self.weights[:bs], metadata)
        else:
            topk = shared
        if forward_batch.reuse_dsa_topk_indices:
            spec_info.dsa_topk_indices = topk
        self.trace.append(dict(step=step, seed_given=step == 0 and shared is not None, indexer_ran=shared is None))
        self.record[step, :bs].copy_(topk[:bs])

        module = self.kit.module
        hidden = forward_batch.spec_info.hidden_states + self.kit.token_embed(forward_batch.input_ids)
        q_nope, q_rope = module.project_q(hidden)
        k_nope, k_rope = module.project_k(hidden)
        out = module.attn(q_nope, k_nope, k_nope, forward_batch, k_rope=k_rope, q_rope=q_rope, topk_indices=topk)
        hidden = module.o_proj(out.reshape(-1, module.num_heads * module.qk_nope_head_dim))
        logits = self.kit.lm_head(hidden).float()
        return SimpleNamespace(logits_output=LogitsProcessorOutput(next_token_logits=logits, hidden_states=hidden))


def build(torch, device):
    from sglang.srt.layers.attention.dsa import dsa_indexer
    from sglang.srt.layers.attention.dsa.triton_kernel import act_quant
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    from sglang.srt.speculative.draft_utils import DraftBackendFactory
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.test.kits.attention_unittest.attention_methods import dsa_attention as kit
    from sglang.test.kits.attention_unittest.runner_modes import speculative_draft_runner as sdr

    case = ix.kit_case(kit, "sglpatch_seeded_draft_loop", ForwardMode.DECODE, 4, PREFIX_LENS)
    bs = case.batch_size
    settings = sdr.EagleDraftRunnerSettings(
        topk=1,
        speculative_num_steps=NUM_STEPS,
        speculative_num_draft_tokens=NUM_STEPS + 1,
        capture_batch_size=bs,
        hidden_size=64,
        vocab_size=64,
        max_context_len=MAX_CONTEXT,
        dtype=torch.bfloat16,
        device=device,
        atol=kit.DSA_SPARSE_ATOL,
        rtol=kit.DSA_SPARSE_RTOL,
    )
    fixture = kit.build_dsa_sparse_attention_fixture(
        None, case, max_context_len=MAX_CONTEXT, index_topk=INDEX_TOPK, **ix.graph_runner(torch, device, bs)
    )
    runner = fixture.runner
    sdr._configure_runner_for_eagle_draft(runner, case, settings)
    hf = runner.model_config.hf_config
    hf.index_share_for_mtp_iteration = True  # IndexShare on (chain drafting, topk 1)
    index_topk = hf.index_topk
    draft_backend = DraftBackendFactory(
        runner.server_args, runner, settings.topk, settings.speculative_num_steps
    ).create_decode_backend()
    runner.draft_attn_backend = draft_backend

    draft_inputs = sdr._make_dsa_draft_inputs(case, settings)
    sdr._prepare_dsa_draft_replay_state(fixture, case, draft_inputs, settings)

    # index-K cache for every position a draft step may select, through sglang's store path
    indexer = ix.make_indexer(dsa_indexer, index_topk, device)
    req_to_token = runner.req_to_token_pool.req_to_token
    slots = torch.cat([req_to_token[r, : p + NUM_STEPS] for r, p in enumerate(PREFIX_LENS)]).to(torch.int64)
    gen = torch.Generator(device=device).manual_seed(77)
    keys = torch.randn((slots.numel(), ix.INDEX_HEAD_DIM), generator=gen, device=device, dtype=torch.bfloat16)
    with forward_context(ForwardContext(attn_backend=fixture.backend)):
        indexer._store_index_k_cache(None, 0, keys, act_quant=act_quant, out_cache_loc=slots.contiguous())
    q_fp8, weights = ix.random_queries(torch, act_quant, bs, 99, device)

    forward = SharedTopkDraftForward(
        torch,
        sdr._make_dsa_model_forward(fixture, settings),
        indexer,
        q_fp8,
        weights,
        bs,
        index_topk,
        device,
    )
    worker = sdr._EagleDraftWorkerHarness(
        fixture=fixture, draft_attn_backend=draft_backend, model_forward=forward, settings=settings
    )
    init_state = getattr(EagleDraftWorker, "_init_dsa_index_share_state", None)
    if init_state is None:
        raise RuntimeError("EagleDraftWorker._init_dsa_index_share_state is missing: not a patched tree")
    init_state(worker)
    return SimpleNamespace(
        case=case,
        settings=settings,
        fixture=fixture,
        worker=worker,
        draft_backend=draft_backend,
        draft_inputs=draft_inputs,
        forward=forward,
        req_to_token=req_to_token,
        index_topk=index_topk,
        sdr=sdr,
    )


def seed_from_positions(torch, req_to_token, start, index_topk):
    """A seed that differs from the indexer's choice: the slots of positions start..start+k-1."""
    rows = [req_to_token[r, start : start + index_topk] for r in range(len(PREFIX_LENS))]
    return torch.stack(rows).to(torch.int32).contiguous()


def batch(env, seed):
    b = env.sdr._make_dsa_eagle_draft_forward_batch(env.case, env.draft_inputs, env.settings)
    b.spec_info.dsa_topk_indices = None if seed is None else seed.clone()
    return b


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    ix.select_tree(Path(args.tree))
    import torch

    result = dict(tree=str(Path(args.tree).resolve()), checks={}, trace=[], error=None)
    checks = result["checks"]

    def check(name, ok, **evidence):
        checks[name] = dict(ok=bool(ok), **evidence)
        print(f"[seed-draft-loop] {'PASS' if ok else 'FAIL'} {name} {evidence}", flush=True)

    try:
        calls = ix.Calls()
        calls.install()
        env = build(torch, "cuda")
        w, fwd, k = env.worker, env.forward, env.index_topk
        seed_a = seed_from_positions(torch, env.req_to_token, 0, k)
        seed_b = seed_from_positions(torch, env.req_to_token, 500, k)
        result["worker"] = dict(
            index_share_for_mtp_iteration=w.index_share_for_mtp_iteration,
            seed_dsa_topk_from_draft_extend=w.seed_dsa_topk_from_draft_extend,
            dsa_index_topk=w.dsa_index_topk,
        )
        check("worker_seed_enabled", w.seed_dsa_topk_from_draft_extend and w.dsa_index_topk == k, **result["worker"])

        # eager references: the real draft_forward, seeded and unseeded
        eager = {}
        for name, seed in (("unseeded", None), ("seed_a", seed_a), ("seed_b", seed_b)):
            out = env.sdr._run_eagle_draft_eager(w, batch(env, seed))
            torch.cuda.synchronize()
            eager[name] = (out, fwd.record.clone())
        eager_indexer_topk = eager["unseeded"][1][0, : len(PREFIX_LENS)]
        check(
            "eager_unseeded_step0_ran_indexer",
            [t["indexer_ran"] for t in fwd.trace[:2]] == [True, False],
            trace=fwd.trace[:2],
        )
        check(
            "indexer_topk_differs_from_seed",
            not _same_sets(torch, eager_indexer_topk, seed_a),
        )

        # capture: the patched runner, one draft loop per batch size, reading the seed buffer
        fwd.trace.clear()
        graph_runner = env.sdr._capture_eagle_draft_graph_runner(w, env.draft_backend, env.settings)
        capture_trace = list(fwd.trace)
        result["capture_trace"] = capture_trace
        step0 = [t for t in capture_trace if t["step"] == 0]
        # the full-graph backend's own table of captured graphs (one per shape key)
        captured = sorted(str(key) for key in graph_runner.backend._graphs)
        result["captured_graphs"] = captured
        check(
            "captured_one_seeded_loop_per_batch_size",
            len(captured) == len(graph_runner.capture_bs)
            and bool(step0)
            and all(t["seed_given"] and not t["indexer_ran"] for t in step0),
            step0=step0,
            captured_graphs=captured,
            capture_bs=list(graph_runner.capture_bs),
        )
        replayed = []
        orig_replay = graph_runner._replay_graph

        def replay_spy(shape_key, forward_batch):
            replayed.append(dict(size=shape_key.size, variant_label=shape_key.variant_label))
            return orig_replay(shape_key, forward_batch)

        graph_runner._replay_graph = replay_spy
        env.sdr._prepare_dsa_draft_replay_state(env.fixture, env.case, env.draft_inputs, env.settings)

        def run(seed):
            """What EagleDraftWorker.draft does: replay if the runner takes the batch, else eager."""
            fwd.record.fill_(-2)
            fwd.trace.clear()
            b = batch(env, seed)
            took = graph_runner.can_run_graph(b)
            out = graph_runner.execute(b) if took else env.sdr._run_eagle_draft_eager(w, b)
            torch.cuda.synchronize()
            return took, out, fwd.record.clone(), list(fwd.trace)

        n = len(PREFIX_LENS)
        taken = {}
        for name, seed in (("seed_a", seed_a), ("unseeded", None), ("seed_b", seed_b)):
            took, out, rec, trace = run(seed)
            taken[name] = took
            if seed is not None:
                check(
                    f"graph_{name}_steps_used_seed",
                    took and torch.equal(rec[0, :n], seed) and torch.equal(rec[1, :n], seed),
                    replayed=took,
                )
            else:
                check(
                    "unseeded_eager_step0_ran_indexer",
                    not took
                    and [t["indexer_ran"] for t in trace] == [True, False]
                    and _same_sets(torch, rec[0, :n], eager_indexer_topk)
                    and not _same_sets(torch, rec[0, :n], seed_a),
                    trace=trace,
                )
                check("unseeded_eager_step1_reused_step0", torch.equal(rec[1, :n], rec[0, :n]))
            label = f"graph_{name}_matches_eager" if seed is not None else "unseeded_fallback_matches_eager"
            try:
                env.sdr._assert_draft_outputs_close(out, eager[name][0], env.settings)
                check(label, True)
            except AssertionError as exc:
                check(label, False, error=str(exc)[:400])
        check(
            "only_seeded_batches_replayed",
            taken == dict(seed_a=True, unseeded=False, seed_b=True) and len(replayed) == 2,
            taken=taken,
            replayed=replayed,
        )
        result["exercised"] = calls.exercised()
        result["watched_but_not_present"] = calls.missing
    except Exception:  # noqa: BLE001 - reported in the JSON, and the exit code says it failed
        result["error"] = traceback.format_exc()
        print(result["error"], flush=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    ok = result["error"] is None and checks and all(c["ok"] for c in checks.values())
    return 0 if ok else 1


def _same_sets(torch, a, b):
    return torch.equal(torch.sort(a.to(torch.int64), dim=-1).values, torch.sort(b.to(torch.int64), dim=-1).values)


if __name__ == "__main__":
    sys.exit(main())
