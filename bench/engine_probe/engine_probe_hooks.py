"""What the engine benchmark reads out of sglang's scheduler process (installed by sitecustomize.py).

Hooks, each installed when sglang imports the module it wraps (a post-import hook, so sglang's
own import order is untouched):

- ``ModelRunner.forward`` of the target model, for TARGET_VERIFY batches: two CUDA events on
  the current stream around the call (a CUDA-graph replay, or the eager forward), so each
  record is the verify forward's GPU time, with the wall-clock start, the batch size, whether
  a graph ran, and the shape of the paged-MQA context lengths the DSA metadata carried
  (``[B*next_n, 1]``: one token per DeepGEMM row; ``[B, 2]`` / ``[B*next_n/2, 2]``: two). A
  background thread turns finished events into lines of ``DIR/verify.jsonl``; the forward
  itself never waits for the GPU.
- on request (``DIR/profile.json`` naming a tag and a step count), the next verify forwards are
  each run inside ``torch.profiler`` (CUDA activity only, synchronised before and after, so
  only that forward's kernels are in it); the kernel totals go to ``DIR/profile-<tag>.json``.
  Profiled forwards are marked in verify.jsonl and left out of the timings.
- what a run asks for (``DIR/mode.json``, written by bench/engine_worker.py before a run; read
  at the first verify forward after it changes): ``simulate_acc_len`` sets sglang's own
  ``SGLANG_SIMULATE_ACC_LEN`` benchmark switch for the scheduler (every verify accepts that many
  tokens; null: off), and ``record_positions`` writes, per verify forward, the target's argmax, its
  top-1 minus top-2 logit margin and the row's logit sum for every next_n position of every
  request to ``DIR/positions.jsonl`` (this waits for the GPU: accuracy runs only, never timed ones).
- with ``record_positions``, also every draft position (``DIR/draft_positions.jsonl``, one line per
  draft-extend pass and per draft loop: each request's id, and per position the draft model's
  argmax and top-1 minus top-2 logit margin). Position 0 of a draft (the token draft-extend
  proposes) comes from the logits ``_draft_extend_for_decode`` / ``_draft_extend_for_prefill``
  leave on the output of the forward they ran: the eager ``ModelRunner.forward`` of the draft
  model, or ``EAGLEDraftExtendCudaGraphRunner.execute``, whose ``next_token_logits`` both trees cut
  to each request's last accepted row before they return. Positions 1.. come from the draft loop's
  forwards (``EagleDraftWorker.draft_forward``): called eagerly, their logits pass through
  ``ModelRunner.forward``; replayed from ``EAGLEDraftCudaGraphRunner``'s graph, they are the tensors
  the capture of that batch size's graph produced, which the probe keeps from the capture
  (``capture_one_shape``) and reads after each ``execute`` for the rows it replayed. Keeping them
  adds no kernel and changes no launch: it only keeps the capture's per-step logits alive, so their
  memory (batch size x vocabulary x 4 bytes per draft forward and captured size) is not given to
  other buffers of later captures;
- ``DecodeCudaGraphRunner.capture`` (and the EAGLE draft and draft-extend runners, which inherit it):
  the memory torch holds in this process before and after each capture round, and after the target
  KV pool, to ``DIR/memory.json`` (process-local, so another engine starting beside this one does not
  show in it as it does in sglang's own free-memory figures);
- ``ModelRunner.alloc_memory_pool``: ``DIR/pool_ready`` once the target model's KV pool exists
  (a second engine on the same GPU starts after it, so its memory profile sees this one's pool).
- with ``SGLPATCH_EAGER_DRAFT_EXTEND=1`` in the environment (the benchmark's reference engine for
  draft positions, never a timed one): ``EAGLEDraftExtendCudaGraphRunner.can_run_graph`` says no, so
  every draft-extend pass runs eagerly, as a tree without the draft-extend graph runs it.
- ``EagleDraftWorker.draft`` (EAGLE v2): per draft loop, whether the batch carried a
  draft-extend top-k seed (IndexShare), counted into ``DIR/draft_loops.json``.
- the parts of an EAGLE v2 decode step, each timed like the verify forward (two CUDA events on
  the current stream) and on the host (wall time of the Python call, which launches the part's
  work and does not wait for it): the whole step (``EAGLEWorkerV2.forward_batch_generation`` of
  a decode batch), the draft loop (``EagleDraftWorker.draft``), verify (``EAGLEWorkerV2.verify``:
  the target forward and acceptance) and draft-extend
  (``EagleDraftWorker._draft_extend_for_decode``, with whether it replayed the draft-extend CUDA
  graph, seen at ``EAGLEDraftExtendCudaGraphRunner.execute``), one line each in
  ``DIR/steps.jsonl``. A step's GPU time runs from its first launch reaching the GPU to its last
  kernel's end, so GPU idle time while the host launches counts in it. Beside the host's wall time
  each part has the calling thread's CPU time (``cpu_ms``) and the vCPU it ended on (``cpu``): where
  the same code's host time moves from run to run, CPU time that moves with it says the CPU ran it
  slower, CPU time that stays says the thread waited (descheduled, or for the GIL).
"""

from __future__ import annotations

import collections
import importlib.abc
import json
import os
import sys
import threading
import time
from pathlib import Path

STEPS_FILE = "steps.jsonl"
VERIFY_FILE = "verify.jsonl"
FLUSHED_FILE = "flushed.json"
POSITIONS_FILE = "positions.jsonl"
DRAFT_POSITIONS_FILE = "draft_positions.jsonl"
MEMORY_FILE = "memory.json"
EAGER_DRAFT_EXTEND = "SGLPATCH_EAGER_DRAFT_EXTEND"
MODE_FILE = "mode.json"
SPEC_UTILS = "sglang.srt.speculative.spec_utils"  # where sglang's verify reads SIMULATE_ACC_LEN each call
# The timed parts of a decode step (see the module docstring), in the order a step runs them.
STEP_PARTS = ("step", "draft", "verify", "draft_extend")

# Where a draft-extend top-k seed may sit on EagleDraftInput (the v0.5.14 line's backport, and
# upstream's name from #29787 on), and the flags that say it is valid.
SEED_TENSORS = ("dsa_topk_indices", "dsa_topk_seed")
SEED_FLAGS = ("has_dsa_topk_indices", "dsa_topk_indices_valid", "has_dsa_topk_seed")

_probe = None


def install(folder: str) -> None:
    global _probe
    if _probe is not None:
        return
    _probe = Probe(Path(folder))
    sys.meta_path.insert(
        0,
        AfterImport(
            {
                "sglang.srt.model_executor.model_runner": _hook_model_runner,
                "sglang.srt.speculative.eagle_worker_v2": _hook_eagle_worker,
                "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner": _hook_draft_extend_runner,
                "sglang.srt.speculative.eagle_draft_cuda_graph_runner": _hook_draft_runner,
                "sglang.srt.model_executor.runner.decode_cuda_graph_runner": _hook_graph_capture,
            }
        ),
    )


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` right after sglang has executed module ``name``."""

    def __init__(self, hooks):
        self.hooks = dict(hooks)

    def find_spec(self, name, path, target=None):
        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            hook(module)

        spec.loader.exec_module = exec_then_hook
        return spec


class DraftPositions:
    """What the draft hooks collect: each draft-loop graph's per-step logits, kept from its capture (by
    captured batch size), and inside one recorded call the logits that call produced."""

    def __init__(self):
        self.graph_logits = {}  # captured batch size -> the logits of each draft forward, in step order
        self.capturing = None  # the batch size whose draft-loop graph is being captured
        self.loop = None  # inside a recorded draft loop: its eager forwards' logits, in step order
        self.replayed = None  # (captured, real) batch size of the draft-loop graph the loop replayed
        self.extend = None  # inside a recorded draft-extend: the output of its forward (a list of one)

    def saw_draft_forward(self, output) -> None:
        """A forward of the draft model (``ModelRunner.forward`` of the draft worker); in a timed run,
        two attribute checks and nothing else."""
        logits_output = getattr(output, "logits_output", output)
        if getattr(logits_output, "next_token_logits", None) is None:  # an idle batch
            return
        if self.capturing is not None and _capturing():
            self.graph_logits[self.capturing].append(logits_output.next_token_logits)
        elif self.extend is not None:
            self.extend[:] = [logits_output]
        elif self.loop is not None:
            self.loop.append(logits_output.next_token_logits)

    def loop_logits(self) -> list:
        """The recorded draft loop's logits, one tensor per draft forward: the eager ones, or those of
        the graph it replayed, cut to the batch's own rows."""
        if self.replayed is None:
            return list(self.loop or [])
        size, rows = self.replayed
        return [logits[:rows] for logits in self.graph_logits.get(size, [])]


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def top2(logits) -> tuple[list[int], list[float]]:
    """Per row: the argmax and the top-1 minus top-2 margin (waits for the GPU)."""
    import torch

    top = torch.topk(logits.float(), 2, dim=-1)
    return top.indices[:, 0].tolist(), [round(m, 5) for m in (top.values[:, 0] - top.values[:, 1]).tolist()]


def draft_record(kind: str, batch, logits_per_position: list) -> dict | None:
    """One draft_positions.jsonl line: per request of ``batch`` (its rid), the argmax and margin at each
    position ``logits_per_position`` holds; None where there is nothing to record."""
    rids = [getattr(req, "rid", None) for req in getattr(batch, "reqs", None) or []]
    if not rids or not logits_per_position or any(logits.shape[0] < len(rids) for logits in logits_per_position):
        return None
    tops = [top2(logits[: len(rids)]) for logits in logits_per_position]
    return {
        "t": time.time(),
        "kind": kind,
        "batch_size": len(rids),
        "rids": rids,
        "argmax": [[argmax[row] for argmax, _ in tops] for row in range(len(rids))],
        "margin": [[margin[row] for _, margin in tops] for row in range(len(rids))],
    }


class Probe:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.pending = collections.deque()
        self.draft_loops = {"loops": 0, "seeded": 0, "index_share": None}
        self.profile_left = 0
        self.profile_tag = None
        self.profile_steps = []
        self.draft_extend_replays = 0
        self._thread = None
        self.mode = {}
        self._mode_stamp = None
        self._env_acc_len = None
        self._positions = None
        self._draft_positions = None
        self.drafts = DraftPositions()
        self.memory = {"graphs": []}

    # -- what a run asks for --------------------------------------------------------------
    def apply_mode(self) -> dict:
        """Re-read ``mode.json`` when it changed and set sglang's acceptance switch from it."""
        path = self.folder / MODE_FILE
        try:
            stat = path.stat()
        except FileNotFoundError:
            return self.mode
        stamp = (stat.st_ino, stat.st_mtime_ns)  # the worker replaces the file: a new inode each time
        if stamp == self._mode_stamp:
            return self.mode
        self._mode_stamp = stamp
        self.mode = json.loads(path.read_text())
        spec_utils = sys.modules.get(SPEC_UTILS)
        if spec_utils is not None:
            if self._env_acc_len is None:
                self._env_acc_len = spec_utils.SIMULATE_ACC_LEN
            wanted = self.mode.get("simulate_acc_len")
            spec_utils.SIMULATE_ACC_LEN = float(wanted) if wanted else self._env_acc_len
        return self.mode

    def record_positions(self, output, batch_size: int, wall: float) -> None:
        """The target's verdict at every verify position (waits for the GPU)."""
        logits = getattr(getattr(output, "logits_output", output), "next_token_logits", None)
        if logits is None:
            return
        argmax, margin = top2(logits)
        record = {
            "t": wall,
            "batch_size": batch_size,
            "argmax": argmax,
            "margin": margin,
            "logit_sum": logits.double().sum(dim=-1).tolist(),
        }
        self._write_line("_positions", POSITIONS_FILE, record)

    def recording(self) -> bool:
        return bool(self.mode.get("record_positions"))

    def record_draft(self, kind: str, batch, logits) -> None:
        """One draft_positions.jsonl line from ``logits()`` (the logits per position); a failure is
        written as an ``error`` line, never raised into sglang's scheduler."""
        try:
            record = draft_record(kind, batch, logits())
        except Exception as exc:
            record = {"t": time.time(), "kind": "error", "rids": [], "error": f"{kind}: {type(exc).__name__}: {exc}"}
        if record:
            self._write_line("_draft_positions", DRAFT_POSITIONS_FILE, record)

    def _write_line(self, handle: str, name: str, record: dict) -> None:
        if getattr(self, handle) is None:
            setattr(self, handle, open(self.folder / name, "a", buffering=1))
        getattr(self, handle).write(json.dumps(record) + "\n")

    def note_memory(self, key: str, value) -> None:
        """One figure of this process's GPU memory (memory.json, rewritten whole each time)."""
        if key == "graphs":
            self.memory["graphs"].append(value)
        else:
            self.memory[key] = value
        self._write_json(MEMORY_FILE, self.memory)

    # -- verify timing --------------------------------------------------------------------
    def start_flusher(self, device) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._flush_loop, args=(device,), daemon=True)
            self._thread.start()

    def _flush_loop(self, device) -> None:
        import torch

        torch.cuda.set_device(device)
        outs = {name: open(self.folder / name, "a", buffering=1) for name in (VERIFY_FILE, STEPS_FILE)}
        while True:
            self.flush_finished(outs)
            self._write_json("draft_loops.json", self.draft_loops)
            # what the worker waits for before it reads a run's records: a pass at or after the run's end
            # that left nothing pending
            self._write_json(FLUSHED_FILE, {"t": time.time(), "pending": len(self.pending)})
            time.sleep(0.05)

    def flush_finished(self, outs) -> None:
        """Write every pending record whose end event has completed, in launch order, to its file."""
        while self.pending and self.pending[0][-1].query():
            name, record, start, end = self.pending.popleft()
            record["gpu_ms"] = start.elapsed_time(end)
            outs[name].write(json.dumps(record) + "\n")

    def timed_part(self, part: str, batch_size: int, call):
        """``call()`` between two CUDA events, its host time beside them; one line of steps.jsonl."""
        import torch

        self.start_flusher(torch.cuda.current_device())
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        replays = self.draft_extend_replays
        wall, t0, cpu0 = time.time(), time.perf_counter(), time.thread_time()
        start.record()
        result = call()
        end.record()
        record = {
            "t": wall,
            "part": part,
            "batch_size": batch_size,
            "host_ms": (time.perf_counter() - t0) * 1000.0,
            "cpu_ms": (time.thread_time() - cpu0) * 1000.0,
            "cpu": _current_cpu(),
        }
        if part == "draft_extend":
            record["graph"] = self.draft_extend_replays > replays
        self.pending.append((STEPS_FILE, record, start, end))
        return result

    def _write_json(self, name: str, value) -> None:
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.folder / name)

    # -- profile windows ------------------------------------------------------------------
    def profile_requested(self) -> bool:
        if self.profile_left:
            return True
        request = self.folder / "profile.json"
        if not request.exists():
            return False
        spec = json.loads(request.read_text())
        request.unlink()
        self.profile_tag, self.profile_left, self.profile_steps = spec["tag"], int(spec["steps"]), []
        return True

    def record_profile_step(self, prof, gpu_ms: float, batch_size: int) -> None:
        kernels = collections.defaultdict(lambda: [0.0, 0])
        for event in prof.key_averages():
            device_us = getattr(event, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(event, "self_cuda_time_total", 0.0)
            if device_us and getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type):
                kernels[event.key][0] += device_us
                kernels[event.key][1] += event.count
        self.profile_steps.append({"gpu_ms": gpu_ms, "batch_size": batch_size, "kernels": dict(kernels)})
        self.profile_left -= 1
        if not self.profile_left:
            self._write_json(f"profile-{self.profile_tag}.json", {"tag": self.profile_tag, "steps": self.profile_steps})


def _libc_sched_getcpu():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):  # not glibc
        return None


_SCHED_GETCPU = _libc_sched_getcpu()


def _current_cpu() -> int | None:
    return _SCHED_GETCPU() if _SCHED_GETCPU is not None else None


def _paged_mqa_rows(model_runner):
    metadata = getattr(getattr(model_runner, "attn_backend", None), "forward_metadata", None)
    ctx = getattr(metadata, "paged_mqa_ctx_lens_2d", None)
    layout = getattr(metadata, "paged_mqa_layout", None)
    return {
        "ctx_lens_2d": list(ctx.shape) if ctx is not None else None,
        "layout": getattr(layout, "value", None) if layout is not None else None,
    }


def _hook_model_runner(module) -> None:
    import torch

    runner_class = module.ModelRunner
    forward = runner_class.forward
    alloc_memory_pool = getattr(runner_class, "alloc_memory_pool", None)

    def timed_forward(self, forward_batch, *args, **kwargs):
        if getattr(self, "is_draft_worker", False):
            output = forward(self, forward_batch, *args, **kwargs)
            _probe.drafts.saw_draft_forward(output)
            return output
        if not forward_batch.forward_mode.is_target_verify():
            return forward(self, forward_batch, *args, **kwargs)
        _probe.start_flusher(torch.cuda.current_device())
        mode = _probe.apply_mode()
        profiled = _probe.profile_requested()
        prof = None
        if profiled:
            torch.cuda.synchronize()
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        wall = time.time()
        start.record()
        output = forward(self, forward_batch, *args, **kwargs)
        end.record()
        record = {
            "t": wall,
            "batch_size": int(forward_batch.batch_size),
            "graph": bool(getattr(output, "can_run_graph", False)),
            "profiled": profiled,
            **_paged_mqa_rows(self),
        }
        if prof is not None:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            _probe.record_profile_step(prof, start.elapsed_time(end), record["batch_size"])
        _probe.pending.append((VERIFY_FILE, record, start, end))
        if mode.get("record_positions"):
            _probe.record_positions(output, record["batch_size"], wall)
        return output

    runner_class.forward = timed_forward

    if alloc_memory_pool is not None:

        def alloc_then_mark(self, *args, **kwargs):
            before = torch.cuda.memory_reserved()
            result = alloc_memory_pool(self, *args, **kwargs)
            draft = getattr(self, "is_draft_worker", False)
            _probe.note_memory(
                "draft_kv_pool_gib" if draft else "kv_pool_gib", _gib(torch.cuda.memory_reserved() - before)
            )
            if not draft:
                (_probe.folder / "pool_ready").write_text(str(time.time()))
            return result

        runner_class.alloc_memory_pool = alloc_then_mark


def _seed_present(spec_info) -> bool:
    for flag in SEED_FLAGS:
        value = getattr(spec_info, flag, None)
        if callable(value):
            value = value()
        if isinstance(value, bool):
            return value
    for name in SEED_TENSORS:
        seed = getattr(spec_info, name, None)
        if seed is not None and getattr(seed, "numel", lambda: 0)() > 0:
            return True
    return False


def _batch_size(batch) -> int:
    seq_lens = getattr(batch, "seq_lens", None)
    return int(seq_lens.shape[0]) if seq_lens is not None else 0


def _is_decode_step(batch) -> bool:
    return not (batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False))


def _time_method(owner, name: str, part: str, when=None) -> None:
    """Wrap ``owner.name(self, batch, ...)`` in ``Probe.timed_part`` (only where ``when(batch)``)."""
    method = getattr(owner, name, None)
    if method is None:
        return

    def timed(self, batch, *args, **kwargs):
        if when is not None and not when(batch):
            return method(self, batch, *args, **kwargs)
        return _probe.timed_part(part, _batch_size(batch), lambda: method(self, batch, *args, **kwargs))

    setattr(owner, name, timed)


def _hook_eagle_worker(module) -> None:
    worker_class = getattr(module, "EagleDraftWorker", None)
    if worker_class is None or not hasattr(worker_class, "draft"):
        return
    _time_method(worker_class, "draft", "draft")
    _time_method(worker_class, "_draft_extend_for_decode", "draft_extend")
    spec_worker = getattr(module, "EAGLEWorkerV2", None)
    if spec_worker is not None:
        _time_method(spec_worker, "verify", "verify")
        _time_method(spec_worker, "forward_batch_generation", "step", when=_is_decode_step)
    draft = worker_class.draft

    def counted_draft(self, batch, *args, **kwargs):
        counts = _probe.draft_loops
        counts["loops"] += 1
        counts["seeded"] += _seed_present(batch.spec_info)
        counts["index_share"] = bool(getattr(self, "index_share_for_mtp_iteration", False))
        return draft(self, batch, *args, **kwargs)

    worker_class.draft = counted_draft
    _record_draft_loop(worker_class)
    for name in ("_draft_extend_for_decode", "_draft_extend_for_prefill"):
        _record_draft_extend(worker_class, name)


def _record_draft_loop(worker_class) -> None:
    """In a recorded run, each draft loop's positions 1.. (module docstring)."""
    draft = worker_class.draft

    def recorded_draft(self, batch, *args, **kwargs):
        if not _probe.recording():
            return draft(self, batch, *args, **kwargs)
        drafts = _probe.drafts
        drafts.loop, drafts.replayed = [], None
        try:
            result = draft(self, batch, *args, **kwargs)
            _probe.record_draft("loop", batch, drafts.loop_logits)
            return result
        finally:
            drafts.loop, drafts.replayed = None, None

    worker_class.draft = recorded_draft


def _record_draft_extend(worker_class, name: str) -> None:
    """In a recorded run, the position 0 each draft-extend pass proposes (module docstring)."""
    method = getattr(worker_class, name, None)
    if method is None:
        return
    kind = "prefill_extend" if name.endswith("prefill") else "extend"

    def recorded_extend(self, batch, *args, **kwargs):
        if not _probe.recording():
            return method(self, batch, *args, **kwargs)
        drafts = _probe.drafts
        drafts.extend = []
        try:
            result = method(self, batch, *args, **kwargs)
            _probe.record_draft(kind, batch, lambda: [out.next_token_logits for out in drafts.extend])
            return result
        finally:
            drafts.extend = None

    setattr(worker_class, name, recorded_extend)


def _hook_draft_extend_runner(module) -> None:
    runner_class = getattr(module, "EAGLEDraftExtendCudaGraphRunner", None)
    if runner_class is None:
        return
    execute = runner_class.execute

    def counted_execute(self, *args, **kwargs):
        _probe.draft_extend_replays += 1
        output = execute(self, *args, **kwargs)
        if _probe.drafts.extend is not None:
            _probe.drafts.extend[:] = [output]
        return output

    runner_class.execute = counted_execute
    if os.environ.get(EAGER_DRAFT_EXTEND) == "1":
        runner_class.can_run_graph = lambda self, forward_batch: False


def _hook_draft_runner(module) -> None:
    """The draft loop's graph: keep each captured size's per-step logits; note which size a loop replays."""
    runner_class = getattr(module, "EAGLEDraftCudaGraphRunner", None)
    if runner_class is None:
        return
    capture_one_shape, execute = runner_class.capture_one_shape, runner_class.execute

    def kept_capture(self, size, *args, **kwargs):
        drafts = _probe.drafts
        drafts.capturing, drafts.graph_logits[size] = size, []
        try:
            return capture_one_shape(self, size, *args, **kwargs)
        finally:
            drafts.capturing = None

    def noted_execute(self, forward_batch, *args, **kwargs):
        output = execute(self, forward_batch, *args, **kwargs)
        _probe.drafts.replayed = (self.bs, self.raw_bs)
        return output

    runner_class.capture_one_shape = kept_capture
    runner_class.execute = noted_execute


def _hook_graph_capture(module) -> None:
    """Every capture round of a decode-side graph runner: the memory torch holds before and after it."""
    runner_class = getattr(module, "DecodeCudaGraphRunner", None)
    capture = getattr(runner_class, "capture", None)
    if capture is None:
        return

    def measured_capture(self, *args, **kwargs):
        import torch

        before = torch.cuda.memory_reserved()
        try:
            return capture(self, *args, **kwargs)
        finally:
            _probe.note_memory(
                "graphs", {"runner": type(self).__name__, "gib": _gib(torch.cuda.memory_reserved() - before)}
            )

    runner_class.capture = measured_capture


def _gib(nbytes: int) -> float:
    return round(nbytes / (1 << 30), 3)
