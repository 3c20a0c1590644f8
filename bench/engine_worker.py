"""One sglang engine of the engine benchmark, in a process of its own (bench/engine_ab.py starts it).

The process imports sglang from the tree first on its PYTHONPATH (pristine or patched), starts
``sglang.Engine`` in-process with the arguments it is given, and then serves JSON commands, one
per line on stdin, answering each with one JSON line on the file descriptor named by
``--reply-fd`` (sglang writes its logs to stdout/stderr, which stay free):

- ``{"op": "generate", "requests": [...], "probe_window": true, "mode": {...}}``: every request at
  once (or after its ``delay_s``), streamed, greedy; each answer gives the output ids, the time of
  every streamed chunk with the completion-token count at that point, sglang's meta_info, the
  output tokens per second of the whole run, and the probe's verify-forward and decode-step-part
  records that fall in the window. ``mode`` (bench/engine_probe: ``simulate_acc_len``,
  ``record_positions``) is handed to the scheduler's probe before the first request; with
  ``record_positions`` the answer also carries the per-position verify and draft records. The probe
  reads the mode at a verify forward, and the draft hooks run before the first one: so where
  ``record_positions`` changes, one short request under the new mode goes first. Request ``i`` of
  the ``n``-th generate runs as sglang request ``r<n>.<i>``, which names it in the draft records;
- ``{"op": "profile", "tag": T, "steps": K}``: the next K verify forwards run under the profiler;
- ``{"op": "info"}``: the resolved server arguments that matter here, and the memory sglang reports
  (``get_server_info``'s ``memory_usage``: weights, KV cache, graphs) beside what the probe measured
  of each capture round (``DIR/memory.json``);
- ``{"op": "shutdown"}``.

A request names its prompt as ``[pool_index, length]``: the first ``length`` tokens of the
deterministic prompt ``pool_index`` (the same ids in every worker), so a shorter case reuses a
longer one's KV through sglang's radix cache instead of prefilling again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

PROMPT_SEED = 20261201
MIN_TOKEN_ID = 2  # ids 0 and 1 are the config's bos / eos
ARMING_REQUEST = {"prompt": [1000, 64], "max_new_tokens": 2}  # a prefix of the warm-up prompt
EAGER_DRAFT_EXTEND = "SGLPATCH_EAGER_DRAFT_EXTEND"  # bench/engine_probe: draft-extend never replays a graph


def prompt_ids(pool_index: int, length: int, vocab_size: int) -> list[int]:
    """The first ``length`` ids of prompt ``pool_index``; a prefix of every longer request of it."""
    import numpy as np

    rng = np.random.default_rng([PROMPT_SEED, pool_index])
    # Drawn in fixed blocks so that a prefix never depends on the length asked for.
    block = 4096
    blocks = [rng.integers(MIN_TOKEN_ID, vocab_size, size=block) for _ in range(0, length, block)]
    return np.concatenate(blocks)[:length].tolist() if blocks else []


class PromptCache:
    """Each prompt's ids built once per worker (32 x 64k ids took a quarter of a second to draw, in every
    run, before the run's first step); each request gets a list of its own, a slice of the longest built."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.built: dict[int, list[int]] = {}

    def ids(self, pool_index: int, length: int) -> list[int]:
        have = self.built.get(pool_index)
        if have is None or len(have) < length:
            have = self.built[pool_index] = prompt_ids(pool_index, length, self.vocab_size)
        return have[:length]


def chunk_times_to_tpot_ms(chunks: list[list[float]]) -> float | None:
    """Time per output token after the first, from (wall time, completion tokens) of each chunk."""
    if len(chunks) < 2:
        return None
    (t0, n0), (t1, n1) = chunks[0], chunks[-1]
    if n1 <= n0:
        return None
    return (t1 - t0) * 1000.0 / (n1 - n0)


def tokens_per_s(outputs: list[dict], t_start: float, t_end: float) -> float | None:
    """Output tokens of every request over the run's wall time (its prefill, served from the radix
    cache, included)."""
    tokens = sum(int(o["meta"].get("completion_tokens") or len(o["output_ids"])) for o in outputs)
    return tokens / (t_end - t_start) if t_end > t_start else None


def write_mode(probe_dir: Path, mode: dict) -> None:
    """What the scheduler's probe applies from its next verify forward on (a new file each time)."""
    tmp = probe_dir / ".mode.json.tmp"
    tmp.write_text(json.dumps(mode))
    os.replace(tmp, probe_dir / "mode.json")


def request_index(rid) -> int | None:
    """Request ``i`` of a generate, from its sglang request id ``r<n>.<i>``; None for another id."""
    head, _, index = str(rid).rpartition(".")
    return int(index) if head.startswith("r") and index.isdigit() else None


class ProbeFile:
    """One of the probe's append-only record files, read on from where the last read stopped. Each file was read
    whole for every run: at the end of a call of 228 runs an engine at 32 x 64k, parsing its steps.jsonl and
    verify.jsonl (2.6 and 0.6 MB) takes 89 and 17 ms on the machine the project is developed on, and the gap
    between runs grew from 0.18 s in the call's first sixth to 0.28 s in its last
    (results/engine_h100_floor64k_aa_run2_gaps.txt, bench/studies/run_gaps.py)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.records: list[dict] = []

    def between(self, t_start: float, t_end: float) -> list[dict]:
        """The records from ``t_start`` to ``t_end``; those before ``t_start`` are dropped, the runs coming in
        time order."""
        self._read_on()
        self.records = [r for r in self.records if r["t"] >= t_start]
        return [r for r in self.records if r["t"] <= t_end]

    def _read_on(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        self.offset += len(whole)
        self.records += [json.loads(line) for line in whole.splitlines() if line.strip()]


class EngineWorker:
    def __init__(self, engine_args: dict, probe_dir: Path, vocab_size: int):
        import sglang

        self.sglang = sglang
        self.probe_dir = probe_dir
        self.probe_files: dict[str, ProbeFile] = {}
        self.vocab_size = vocab_size
        self.engine = sglang.Engine(**engine_args)
        self.prompts = PromptCache(vocab_size)
        self.generates = 0
        self.recording = False

    def info(self) -> dict:
        info = self.engine.get_server_info()
        keep = (
            "version",
            "attention_backend",
            "dsa_prefill_backend",
            "dsa_decode_backend",
            "page_size",
            "disable_overlap_schedule",
            "disable_cuda_graph",
            "cuda_graph_bs_decode",
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_num_draft_tokens",
            "speculative_eagle_topk",
            "kv_cache_dtype",
            "max_total_num_tokens",
            "max_running_requests",
            "chunked_prefill_size",
            "disable_radix_cache",
            "load_format",
        )
        out = {k: _jsonable(info.get(k)) for k in keep if k in info}
        states = info.get("internal_states") or [{}]
        out["memory_usage"] = _jsonable((states[0] or {}).get("memory_usage"))
        out["probe_memory"] = self._read_json("memory.json")
        return out

    def generate(self, requests: list[dict], probe_window: bool = True, mode: dict | None = None) -> dict:
        mode = mode or {}
        write_mode(self.probe_dir, mode)
        if bool(mode.get("record_positions")) != self.recording:
            arming = [self.prompts.ids(*ARMING_REQUEST["prompt"])]
            self._run(self._generate_all([ARMING_REQUEST], f"arm{self.generates}", arming))
            self.recording = bool(mode.get("record_positions"))
        self.generates += 1
        t_start = time.time()
        t0 = time.perf_counter()
        prompts = [self.prompts.ids(*r["prompt"]) for r in requests]
        prompt_s = time.perf_counter() - t0
        outputs = self._run(self._generate_all(requests, f"r{self.generates}", prompts))
        t_end = time.time()
        answer = {
            "t_start": t_start,
            "t_end": t_end,
            "prompt_s": prompt_s,
            "outputs": outputs,
            "tokens_per_s": tokens_per_s(outputs, t_start, t_end),
        }
        if probe_window:
            answer["verify"] = self._probe_records("verify.jsonl", t_start, t_end)
            answer["steps"] = self._probe_records("steps.jsonl", t_start, t_end)
        if mode.get("record_positions"):
            answer["positions"] = self._probe_records("positions.jsonl", t_start, t_end)
            answer["draft_positions"] = self._probe_records("draft_positions.jsonl", t_start, t_end)
        answer["draft_loops"] = self._read_json("draft_loops.json")
        return answer

    def _run(self, coroutine):
        return self.engine.loop.run_until_complete(coroutine)

    async def _generate_all(self, requests: list[dict], tag: str, prompts: list[list[int]]) -> list[dict]:
        """Each request with its prompt's ids (``prompts``, in the same order)."""
        runs = (
            self._generate_one(r, ids, f"{tag}.{i}") for i, (r, ids) in enumerate(zip(requests, prompts, strict=True))
        )
        return await asyncio.gather(*runs)

    async def _generate_one(self, request: dict, input_ids: list[int], rid: str) -> dict:
        if request.get("delay_s"):
            await asyncio.sleep(request["delay_s"])
        params = {"temperature": 0.0, "max_new_tokens": request["max_new_tokens"], "ignore_eos": True}
        extra = {}
        if request.get("top_logprobs"):
            extra = {"return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": -1}
        chunks, last = [], None
        stream = await self.engine.async_generate(
            input_ids=input_ids,
            sampling_params=params,
            stream=True,
            rid=rid,
            **extra,
        )
        async for chunk in stream:
            meta = chunk.get("meta_info", {})
            chunks.append([time.time(), int(meta.get("completion_tokens", len(chunk.get("output_ids", []))))])
            last = chunk
        meta = last.get("meta_info", {}) if last else {}
        out = {
            "output_ids": list(last.get("output_ids", [])) if last else [],
            "chunks": chunks,
            "tpot_ms": chunk_times_to_tpot_ms(chunks),
            "meta": {
                k: _jsonable(meta.get(k))
                for k in (
                    "completion_tokens",
                    "spec_accept_length",
                    "spec_verify_ct",
                    "e2e_latency",
                    "cached_tokens",
                    "prompt_tokens",
                )
            },
        }
        if request.get("top_logprobs"):
            out["top_logprobs"] = [[[lp, tok] for lp, tok, *_ in pos] for pos in meta.get("output_top_logprobs", [])]
        return out

    def _probe_records(self, name: str, t_start: float, t_end: float) -> list[dict]:
        """The probe's records of one run. The probe writes a timed record once its end event has completed,
        in a pass every 50 ms, so the run's last forward or two may not be in the file when the run ends: wait
        (at most 2 s) for a pass at or after the run's end that left nothing pending (``flushed.json``).
        Before 6 Dec 2026 this took the file as soon as it held a record from the run's last 0.5 s, and a
        run's last records were missing from 17-29 of 98 runs at 32 x 64k (engine-benchmark.md)."""
        deadline = time.time() + 2.0
        while time.time() <= deadline and not self._flushed_since(t_end):
            time.sleep(0.01)
        if name not in self.probe_files:
            self.probe_files[name] = ProbeFile(self.probe_dir / name)
        return self.probe_files[name].between(t_start, t_end)

    def _flushed_since(self, t_end: float) -> bool:
        try:
            flushed = self._read_json("flushed.json")
        except ValueError:  # replaced while read
            return False
        return bool(flushed) and flushed["t"] >= t_end and flushed["pending"] == 0

    def profile(self, tag: str, steps: int) -> dict:
        request = self.probe_dir / "profile.json"
        request.write_text(json.dumps({"tag": tag, "steps": steps}))
        return {"requested": str(request)}

    def read_profile(self, tag: str) -> dict | None:
        return self._read_json(f"profile-{tag}.json")

    def _read_json(self, name: str):
        path = self.probe_dir / name
        return json.loads(path.read_text()) if path.exists() else None

    def shutdown(self) -> None:
        self.engine.shutdown()


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _wait_for(path: str | None, timeout_s: float) -> None:
    if not path:
        return
    deadline = time.time() + timeout_s
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:.0f} s")
        time.sleep(0.2)


def serve(args, make_worker=None) -> int:
    """The command loop; ``make_worker(spec)`` builds the engine (a test passes a stand-in)."""
    real_engine = make_worker is None
    if real_engine:
        make_worker = lambda spec: EngineWorker(
            spec["engine"], Path(spec["probe_dir"]), spec["vocab_size"]
        )  # noqa: E731
    reply = os.fdopen(args.reply_fd, "w", buffering=1)

    def answer(value: dict) -> None:
        reply.write(json.dumps(value) + "\n")

    spec = json.loads(Path(args.spec).read_text())
    try:
        t0 = time.time()
        if real_engine:
            import sglang  # noqa: F401  (timed apart from the engine start)
        t_import = time.time() - t0
        _wait_for(spec.get("start_after"), spec.get("start_after_timeout_s", 600))
        if spec.get("eager_draft_extend"):
            os.environ[EAGER_DRAFT_EXTEND] = "1"  # sglang's scheduler process inherits it
        t1 = time.time()
        worker = make_worker(spec)
        answer({"ready": True, "import_s": t_import, "start_s": time.time() - t1, "info": worker.info()})
    except Exception as exc:  # the driver records why this engine never started
        answer({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            op = cmd["op"]
            if op == "generate":
                answer(worker.generate(cmd["requests"], cmd.get("probe_window", True), cmd.get("mode")))
            elif op == "profile":
                answer(worker.profile(cmd["tag"], cmd["steps"]))
            elif op == "read_profile":
                answer({"profile": worker.read_profile(cmd["tag"])})
            elif op == "info":
                answer({"info": worker.info()})
            elif op == "shutdown":
                worker.shutdown()
                answer({"shutdown": True})
                return 0
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as exc:
            answer({"error": f"{type(exc).__name__}: {exc}"})
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="JSON: engine arguments, probe_dir, vocab_size, start_after")
    ap.add_argument("--reply-fd", type=int, required=True)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    return serve(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
