"""A stand-in for sglang's engine behind bench/engine_worker.py's command loop (CPU tests only).

It replaces exactly what a CPU cannot run, ``sglang.Engine`` on a GPU, so the tests can drive
bench/engine_ab.py end to end: the worker protocol, the start gate, ABBA order, the prompt pool,
profile requests, rows and the JSON. What it answers is synthetic and says so (``"stand_in"``):
output ids derived from the prompt (the "patched" tree diverges where its tree folder's name
asks for it), one verify record per output token with a GPU time that depends on the tree, and
per output token the decode step's parts (the patched tree's draft-extend replays a graph and
takes a quarter of pristine's eager GPU and host time). A run's ``mode`` is honoured as sglang's
probe would: a simulated acceptance length emits that many tokens (all id 100) per step, and
``record_positions`` answers one positions record per step with every next_n position, and the
draft records the probe writes (each request's first draft position from its prefill, then per
step a draft-extend's position 0 and a draft loop's positions 1..next_n-2). It reports memory as
sglang and the probe do (the patched tree one capture round more: its draft-extend graph).

A ``stall`` run's pristine engine never answers its first decoding request (its warm-up).

Two mutations of the patched tree's draft, each named by the run's folder, show that the draft
comparison catches what only lowers acceptance: ``stale-lengths`` (a replayed draft-extend that reads
the step before's lengths: every draft position from the second step on follows the step before),
``wrong-seed-row`` (with IndexShare, each request's draft loop seeded from the next request's row:
positions 1.. follow that request). ``patched_eager`` (the patched tree, draft-extend eager) has
neither.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import engine_worker  # noqa: E402


class StandInEngine:
    def __init__(self, spec: dict):
        self.probe_dir = Path(spec["probe_dir"])
        self.label = self.probe_dir.name
        # the patched tree's behaviour, unless the run gave this engine the pristine tree (an A/A call): the
        # tree is the entry after the probe's on the engine's PYTHONPATH (bench/engine/processes.py)
        entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        runs_pristine = len(entries) > 1 and Path(entries[1]).name == "pristine"
        self.patched = "patched" in self.label and not runs_pristine
        self.run_kind = self.probe_dir.parent.parent.name  # the test's folder: what this run stands in for
        # the mutations live in the draft-extend graph, which the eager reference never replays
        self.mutation = self.run_kind if self.patched and not spec.get("eager_draft_extend") else None
        config = json.loads((Path(spec["engine"]["model_path"]) / "config.json").read_text())
        self.index_share = bool(config.get("index_share_for_mtp_iteration"))
        self.generates = 0
        self.prompts = engine_worker.PromptCache(spec["vocab_size"])  # the real worker's, timed as it times it
        self.next_n = spec["engine"]["speculative_num_draft_tokens"]
        # sglang sizes its KV pool to max_total_tokens, or smaller where the GPU's memory is short
        self.kv_tokens = spec["engine"]["max_total_tokens"]
        if self.run_kind == "short-memory" and self.patched:
            self.kv_tokens //= 2
        (self.probe_dir / "pool_ready").write_text(str(time.time()))
        self.profile_tag = None

    def info(self) -> dict:
        graphs = [{"runner": "DecodeCudaGraphRunner", "gib": 0.7}, {"runner": "EAGLEDraftCudaGraphRunner", "gib": 0.36}]
        if self.patched:
            graphs.append({"runner": "EAGLEDraftExtendCudaGraphRunner", "gib": 0.64})
        return {
            "stand_in": True,
            # what this process was started with, for the driver's record of it to be checked against
            "layout_seen": {
                "hash_seed": os.environ.get("PYTHONHASHSEED", "random"),
                "personality": int(Path("/proc/self/personality").read_text(), 16),
            },
            "speculative_num_draft_tokens": self.next_n,
            "max_total_num_tokens": self.kv_tokens,
            "memory_usage": {
                "weight": 9.43,
                "kvcache": self.kv_tokens * 3940 / 2**30,
                "graph": 0.7,
                "token_capacity": self.kv_tokens,
            },
            "probe_memory": {
                "kv_pool_gib": self.kv_tokens * 3152 / 2**30,
                "draft_kv_pool_gib": self.kv_tokens * 788 / 2**30,
                "graphs": graphs,
            },
        }

    def die_as_a_cuda_fault_does(self):
        """What sglang's scheduler left in the H200's log when a kernel faulted: the traceback, then
        faulthandler's dump of idle threads after it."""
        print("Scheduler hit an exception: Traceback (most recent call last):")
        print('  File "scheduler.py", line 958, in process_batch_result_decode')
        print("torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
        print("Fatal Python error: Aborted\n\nThread 0x00007fb3edfff6c0 (most recent call first):")
        print('  File "threading.py", line 359 in wait\n' * 30, flush=True)
        os._exit(134)

    def hang_as_a_stalled_engine_does(self):
        """What a pristine v0.5.14 engine did on the H200 at next_n 2 (engine_h200_drafts_n2_stalled.log):
        its warm-up request took one step and no answer came."""
        time.sleep(600)

    def generate(self, requests, probe_window=True, mode=None) -> dict:
        mode = mode or {}
        acceptance = int(mode.get("simulate_acc_len") or 1)
        t_start = time.time()
        outputs, verify = [], []
        bs = len(requests)
        decoding = max(r["max_new_tokens"] for r in requests) > 1  # not the prompt pool's prefill
        self.generates += 1
        if not self.patched and self.run_kind == "crash" and bs >= 32 and decoding:
            self.die_as_a_cuda_fault_does()
        if not self.patched and self.run_kind == "stall" and decoding:
            self.hang_as_a_stalled_engine_does()
        prompt_s = 0.0
        for r in requests:
            pool_index, length = r["prompt"]
            t0 = time.perf_counter()
            assert len(self.prompts.ids(pool_index, length)) == length
            prompt_s += time.perf_counter() - t0
            ids = [(pool_index * 7 + length + k) % 1000 for k in range(r["max_new_tokens"])]
            if self.patched and self.run_kind == "diverge" and pool_index == 0 and len(ids) > 3:
                ids[3] += 1
            if acceptance > 1:
                ids = [100] * len(ids)
            chunks = [
                [t_start + 0.001 * k, min(len(ids), (k + 1) * acceptance)] for k in range(-(-len(ids) // acceptance))
            ]
            out = {
                "output_ids": ids,
                "chunks": chunks,
                "tpot_ms": engine_worker.chunk_times_to_tpot_ms(chunks),
                "meta": {"spec_accept_length": 1.0},
            }
            if r.get("top_logprobs"):
                out["top_logprobs"] = [[[-0.5, i], [-0.75, i + 1]] for i in ids]
            outputs.append(out)
        ctx = max(r["prompt"][1] for r in requests)
        gpu_ms = bs * ctx * (0.5e-6 if self.patched else 1e-6)
        steps = -(-max(r["max_new_tokens"] for r in requests) // acceptance)
        parts = []
        for k in range(steps):
            extend = {"gpu_ms": 4.0, "host_ms": 6.0} if not self.patched else {"gpu_ms": 1.0, "host_ms": 1.5}
            timings = {
                "draft": (3.0, 3.0),
                "verify": (gpu_ms, 1.0),
                "draft_extend": (extend["gpu_ms"], extend["host_ms"]),
            }
            timings["step"] = tuple(sum(v[i] for v in timings.values()) for i in (0, 1))
            for part, (part_gpu, part_host) in timings.items():
                record = {
                    "t": t_start + 1e-4 * k,
                    "part": part,
                    "batch_size": bs,
                    "gpu_ms": part_gpu,
                    "host_ms": part_host,
                    "cpu_ms": 0.9 * part_host,  # synthetic: the thread on a CPU 90% of the call
                    "cpu": os.sched_getaffinity(0).pop(),
                }
                if part == "draft_extend":
                    record["graph"] = self.patched
                parts.append(record)
        for k in range(steps):
            verify.append(
                {
                    "t": t_start + 1e-4 * k,
                    "batch_size": bs,
                    "graph": True,
                    "profiled": False,
                    "gpu_ms": gpu_ms,
                    "ctx_lens_2d": [bs, 2],
                    "layout": "stand-in",
                }
            )
        if self.profile_tag:
            kernels = {
                "deep_gemm::fp8_paged_mqa_logits": [gpu_ms * 400, 4],
                "topk_transform": [gpu_ms * 100, 4],
                "gemm": [gpu_ms * 500, 40],
            }
            profile = {"tag": self.profile_tag, "steps": [{"gpu_ms": gpu_ms, "batch_size": bs, "kernels": kernels}] * 3}
            (self.probe_dir / f"profile-{self.profile_tag}.json").write_text(json.dumps(profile))
            self.profile_tag = None
        time.sleep(0.01)
        t_end = time.time() + 1
        answer = {
            "t_start": t_start,
            "t_end": t_end,
            "prompt_s": prompt_s,
            "outputs": outputs,
            "stand_in": True,
            "tokens_per_s": engine_worker.tokens_per_s(outputs, t_start, t_end),
        }
        if mode.get("record_positions"):
            answer["positions"] = self.positions(outputs, bs, t_start)
            answer["draft_positions"] = self.draft_positions(requests, t_start)
        if probe_window:
            answer["verify"] = verify
            answer["steps"] = parts
        answer["draft_loops"] = {"loops": steps, "seeded": steps - 1 if self.patched else 0, "index_share": True}
        return answer

    def positions(self, outputs, bs, t_start) -> list[dict]:
        """Per step, every request's next_n positions: the emitted token at position 0, then draft
        positions; the "diverge" run's patched tree flips request 0's last position at step 3 (a
        near-tie: its margin is tiny)."""
        records = []
        for k in range(max(len(o["output_ids"]) for o in outputs)):
            argmax, margin = [], []
            for i, o in enumerate(outputs):
                token = o["output_ids"][min(k, len(o["output_ids"]) - 1)]
                for j in range(self.next_n):
                    flip = self.patched and self.run_kind == "diverge" and (i, k, j) == (0, 3, self.next_n - 1)
                    argmax.append(token + j + flip)
                    margin.append(0.01 if (i, k, j) == (0, 3, self.next_n - 1) else 1.5)
            records.append(
                {
                    "t": t_start + 1e-4 * k,
                    "batch_size": bs,
                    "argmax": argmax,
                    "margin": margin,
                    "logit_sum": [float(a) for a in argmax],
                }
            )
        return records

    def draft_positions(self, requests, t_start) -> list[dict]:
        """The probe's draft records for these requests, all in one batch (module docstring)."""
        rids = [f"r{self.generates}.{i}" for i in range(len(requests))]
        prompts = [r["prompt"][0] for r in requests]
        records = [self.draft_record("prefill_extend", t_start, rids, prompts, 0, [0])]
        for step in range(max(r["max_new_tokens"] for r in requests)):
            live = [i for i, r in enumerate(requests) if r["max_new_tokens"] > step]
            t = t_start + 1e-4 * (step + 1)
            ids, live_prompts = [rids[i] for i in live], [prompts[i] for i in live]
            records.append(self.draft_record("extend", t, ids, live_prompts, step, [0]))
            if self.next_n > 2:
                positions = list(range(1, self.next_n - 1))
                records.append(self.draft_record("loop", t + 5e-5, ids, live_prompts, step, positions))
        return records

    def draft_record(self, kind, t, rids, prompts, step, positions) -> dict:
        if self.mutation == "stale-lengths" and kind != "prefill_extend":
            step = max(step - 1, 0)
        rows = prompts
        if self.mutation == "wrong-seed-row" and self.index_share and kind == "loop":
            rows = prompts[1:] + prompts[:1]
        argmax = [[(prompt * 31 + step * 7 + p * 3 + (kind == "loop")) % 1000 for p in positions] for prompt in rows]
        return {
            "t": t,
            "kind": kind,
            "batch_size": len(rids),
            "rids": rids,
            "argmax": argmax,
            "margin": [[1.5] * len(positions) for _ in rows],
        }

    def profile(self, tag, steps) -> dict:
        self.profile_tag = tag
        return {"requested": tag}

    def read_profile(self, tag):
        path = self.probe_dir / f"profile-{tag}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def shutdown(self) -> None:
        pass


if __name__ == "__main__":
    raise SystemExit(engine_worker.serve(engine_worker.parse_args(), StandInEngine))
