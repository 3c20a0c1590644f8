"""A whole engine-benchmark run (bench/engine_ab.py parses its command line and hands it here).

Per next_n:
1. the engines start (each after the one before has its KV pool, so its memory profile is honest)
   and warm up;
2. the pool prompts the grid's cases need are prefilled once per engine, each to the longest
   prefix any case asks of it (bench/engine/grid.py), so sglang's radix cache serves every case;
3. each case runs ``reps`` times per engine in an order that goes round the engines
   (bench/engine/schedule.py): greedy or with sglang's simulated acceptance, ``ignore_eos``,
   streamed; then once more per engine, greedy and untimed, with every verify position recorded;
4. cases at or above ``--profile-from`` requests x context run once more per engine with the first
   verify forwards under the profiler (the indexer's share of the step).

Then the IndexShare case (``--seed-case``) per next_n asked for, each with its own engines. The JSON
(``--out``) is rewritten after every case, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import engine_model
from bench.cpu_canary import CpuCanary
from bench.engine import memory
from bench.engine.compare import compare_draft_positions, compare_outputs, first_divergence, logit_margin
from bench.engine.grid import GRIDS, WARMUP_PROMPT, Case, pool_for
from bench.engine.measures import part_value, step_parts, tpot_ms
from bench.engine.processes import EngineProcess
from bench.engine.rows import PATCHED_ONLY_NOTE, case_row, engine_memory, patched_only_row, row_labels
from bench.engine.schedule import cores_for_rep, cpu_groups, physical_cores, run_order, start_order
from bench.engine.sizing import KV_CACHES, Sizing, engine_args, parallel_label, sizing_for
from bench.gpu_clocks import ClockSampler
from bench.host_cpus import HostSampler

# what the IndexShare case needs: its own three engines (warm JIT caches) and 24 short requests, twice
SEED_CASE_S = 150
# what a case needs after its timed runs besides two rounds' time (its greedy runs, a profile): saving, notes
RESERVE_AFTER_RUNS_S = 25


def log(message: str) -> None:
    print(f"[engine-ab {time.strftime('%H:%M:%S')}] {message}", flush=True)


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass
class Bench:
    """One run: the command line it was given (bench/engine_ab.py), what it sizes each engine for, and
    what it has measured so far (rows, engines, notes, IndexShare cases), saved after every case."""

    args: argparse.Namespace
    meta: dict
    sizing: Sizing
    overrides: dict  # sglang.Engine arguments for every engine, over engine_args' own
    acceptance: dict  # next_n -> simulated acceptance of the timed runs
    labels: tuple  # ("pristine", "patched"), ("pristine", "pristine_b", "patched") (a two-process A/A), or ("patched",)
    workdir: Path
    deadline: float
    rows: list = field(default_factory=list)
    engines: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    seed_cases: list = field(default_factory=list)  # the IndexShare case, one per next_n asked for
    block_s: list = field(default_factory=list)  # wall time of each next_n block run so far
    cpus: list = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    blocks_started: int = 0

    @property
    def row_labels(self) -> dict:
        return row_labels(self.meta)

    def save(self) -> None:
        doc = {
            "meta": self.meta,
            "engines": self.engines,
            "rows": self.rows,
            "seed_cases": self.seed_cases,
            "notes": self.notes,
        }
        tmp = self.args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, self.args.out)

    def left_s(self) -> float:
        return self.deadline - time.time()

    def call_s(self, most_s: float = math.inf, least_s: float = 5.0) -> float:
        """A wait's timeout: what the deadline leaves, within ``least_s`` and ``most_s``."""
        return min(most_s, max(least_s, self.left_s()))

    def note(self, message: str) -> None:
        self.notes.append(message)
        log(message)

    def run(self, next_ns: list[int], seed_next_ns: list[int], grid: list) -> int:
        """Every next_n block, then every IndexShare case, each while the deadline leaves it time;
        0 where nothing failed, else 1 (what failed is in the notes)."""
        status = 0
        for next_n in next_ns:
            needed_s = max(self.block_s, default=self.args.min_block_s)
            status |= self.attempt(
                f"next_n={next_n}",
                needed_s,
                f"a block took {needed_s:.0f} s",
                lambda n=next_n: self.run_next_n(n, grid),
            )
            self.save()
        for next_n in seed_next_ns:
            status |= self.attempt(
                f"seed case n{next_n}", SEED_CASE_S, f"it needs {SEED_CASE_S} s", lambda n=next_n: self.run_seed_case(n)
            )
        self.save()
        return status

    def attempt(self, what: str, needed_s: float, why: str, work) -> int:
        """``work()`` unless the deadline leaves less than ``needed_s``; a failure becomes a note (1)."""
        if self.left_s() < needed_s:
            self.note(f"{what}: not run ({self.left_s():.0f} s left before the deadline, {why})")
            return 0
        try:
            work()
        except Exception as exc:
            self.note(f"{what}: {type(exc).__name__}: {exc}"[:4000])
            return 1
        return 0

    def start_engines(
        self, model_dir: Path, next_n: int, tag: str, labels: tuple | None = None, sizing: Sizing | None = None
    ) -> dict:
        """The engines of a block, one after another (each starts once the one before has its KV
        pool, so its memory profile is honest); which starts first moves round block by block. A label
        that starts with ``patched`` runs the patched tree; ``patched_eager`` runs it with every
        draft-extend pass eager (the reference for draft positions where pristine drafts otherwise)."""
        labels, sizing = labels or self.labels, sizing or self.sizing
        spec = {
            "engine": engine_args(model_dir, next_n, sizing, self.overrides),
            "vocab_size": engine_model.VOCAB_SIZE,
        }
        order = start_order(labels, self.blocks_started)
        self.blocks_started += 1
        groups = cpu_groups(self.cpus, len(labels), physical_cores(self.cpus)) if self.args.pin_cpus else None
        engines, previous = {}, None
        for i, label in enumerate(order):
            engine_spec = {**spec, "start_after": str(previous.probe_dir / "pool_ready")} if previous else spec
            engine_spec = {**engine_spec, "eager_draft_extend": label == "patched_eager"}
            tree = self.args.patched if label.startswith("patched") else self.args.pristine
            previous = engines[label] = EngineProcess(
                f"{tag}-{label}",
                tree,
                engine_spec,
                self.workdir,
                [p for p in self.args.extra_path.split(os.pathsep) if p],
                self.meta["env"],
                self.args.worker_script,
                cpus=groups[i] if groups else None,
                fixed_layout=self.args.same_layout,
            )
        try:
            for i, label in enumerate(order):
                self.wait_ready(engines[label], tag, label, next_n, i + 1, sizing)
        except Exception:
            for engine in engines.values():
                engine.stop()
            raise
        return {label: engines[label] for label in labels}

    def wait_ready(
        self, engine: EngineProcess, tag: str, label: str, next_n: int, started: int, sizing: Sizing
    ) -> None:
        """Wait for one engine's start and record it; name a KV pool smaller than it needs."""
        answer = engine.wait_ready(timeout_s=self.call_s(600.0, least_s=60.0))
        self.engines.append(
            {
                "tag": tag,
                "label": label,
                "next_n": next_n,
                "started": started,
                "cpus": engine.cpus,
                "layout": engine.layout,
                **{k: answer[k] for k in ("import_s", "start_s", "info")},
            }
        )
        log(f"{engine.label}: ready (import {answer['import_s']:.0f} s, engine start {answer['start_s']:.0f} s)")
        kv_tokens = (answer.get("info") or {}).get("max_total_num_tokens")
        if kv_tokens is not None and kv_tokens < sizing.needed_kv_tokens:
            self.note(
                f"{engine.label}: a KV pool of {kv_tokens} tokens, below the {sizing.needed_kv_tokens} "
                "the grid needs: pool prompts may be evicted and prefilled again inside timed runs"
            )

    def run_next_n(self, next_n: int, cases: list) -> None:
        t_block = time.time()
        model_dir = engine_model.write_model(self.workdir / f"model-{self.args.layers}l", self.args.layers)
        pair = self.start_engines(model_dir, next_n, f"n{next_n}")
        try:
            warm = [{"prompt": list(WARMUP_PROMPT), "max_new_tokens": 16}] * 8
            for engine in pair.values():
                # the deadline bounds it too, so that a stalled engine leaves time to write the run's notes
                engine.call({"op": "generate", "requests": warm, "probe_window": False}, timeout_s=self.call_s(300))
            self.prefill_pool(pair, next_n, pool_for(cases))
            for case_spec in cases:
                if self.left_s() < 25:
                    self.notes.append(f"next_n={next_n}: stopped before {case_spec} (deadline)")
                    break
                self.run_case(pair, next_n, Case(*case_spec, self.args.new_tokens))
        finally:
            for engine in pair.values():
                engine.stop()
            self.block_s.append(time.time() - t_block)

    def prefill_pool(self, pair: dict, next_n: int, pool: list[dict]) -> None:
        t0 = time.time()
        for label, engine in pair.items():
            t = time.time()
            engine.call(
                {"op": "generate", "requests": pool, "probe_window": False}, timeout_s=self.call_s(least_s=60.0)
            )
            self.note(
                f"next_n={next_n} {label}: prompt pool ({len(pool)} prompts, {sum(r['prompt'][1] for r in pool)} tokens) prefilled in {time.time() - t:.1f} s"
            )
        log(f"next_n={next_n}: pool prefilled ({time.time() - t0:.0f} s)")

    def timed_runs(self, pair: dict, case: Case, timed_mode: dict) -> dict:
        """``reps`` timed runs per engine, in the order that goes round the engines, the core groups
        dealt round them rep by rep (where the engines are pinned); each engine back on its own
        cores after."""
        runs = {label: [] for label in pair}
        labels = tuple(pair)
        groups = [pair[label].cpus for label in labels]
        spare = sorted(set(self.cpus).difference(*groups)) if all(groups) else []
        block_start, block_s = time.time(), 0.0
        with CpuCanary(spare[0] if spare else None) as canary:
            for i, label in enumerate(run_order(labels, self.args.reps)):
                if i % len(labels) == 0:  # a round of the engines starts
                    block_s, block_start = max(block_s, time.time() - block_start), time.time()
                    if i and self.left_s() < 2 * block_s + RESERVE_AFTER_RUNS_S:
                        # whole rounds only, so every engine has as many runs; the greedy runs still fit
                        self.note(
                            f"{case.name}: timed runs stopped after {i // len(labels)} of {self.args.reps} rounds "
                            "(deadline)"
                        )
                        break
                    for other, cpus in (cores_for_rep(labels, groups, i // len(labels)) if all(groups) else {}).items():
                        pair[other].pin(cpus)
                with ClockSampler() as clocks, HostSampler(pair[label].pinned) as host:
                    t0 = time.time()
                    run = pair[label].call({"op": "generate", "requests": case.requests(), "mode": timed_mode})
                    t1 = time.time()
                host_cpus = host.summary and {**host.summary, "cpu_canary": canary.summary_between(t0, t1)}
                runs[label].append(
                    {**run, "cpus": pair[label].pinned, "gpu_clocks": clocks.summary, "host_cpus": host_cpus}
                )
        for label in labels:
            if pair[label].cpus:
                pair[label].pin(pair[label].cpus)
        return runs

    def profiles(self, pair: dict, case: Case, next_n: int, timed_mode: dict) -> dict:
        """The first verify forwards of one more short run per engine under the profiler, for cases
        at or above ``profile_from`` requests x context."""
        if case.batch_size * case.ctx < self.args.profile_from:
            return {}
        out = {}
        for label in (label for label in ("pristine", "patched") if label in pair):
            engine = pair[label]
            tag = f"n{next_n}-{case.name}"
            engine.call({"op": "profile", "tag": tag, "steps": 3})
            requests = [dict(r, max_new_tokens=6) for r in case.requests()]
            engine.call({"op": "generate", "requests": requests, "probe_window": False, "mode": timed_mode})
            out[label] = engine.call({"op": "read_profile", "tag": tag})["profile"]
        return out

    def run_case(self, pair: dict, next_n: int, case: Case) -> None:
        acceptance = self.acceptance.get(next_n)
        timed_mode = {"simulate_acc_len": acceptance} if acceptance else {}
        runs = self.timed_runs(pair, case, timed_mode)
        # one greedy run per engine, untimed, with the target's verdict at every verify position
        greedy = {
            label: engine.call(
                {
                    "op": "generate",
                    "requests": case.requests(),
                    "probe_window": False,
                    "mode": {"record_positions": True},
                }
            )
            for label, engine in pair.items()
        }
        profiles = self.profiles(pair, case, next_n, timed_mode)
        make_row = patched_only_row if self.labels == ("patched",) else case_row
        row = make_row(case, next_n, runs, profiles, self.args.skip, self.row_labels, greedy, acceptance)
        row["mem_gb"] = memory_of(pair)
        if row.get("divergences") and self.args.margins:
            row["margins"] = self.divergence_margins(pair, case, row["divergences"])
        self.rows.append(row)
        self.save()
        log(case_line(row, case))

    def divergence_margins(self, pair: dict, case: Case, divergences: list) -> list:
        runs = {
            label: engine.call({"op": "generate", "requests": case.requests(top_logprobs=True), "probe_window": False})
            for label, engine in pair.items()
        }
        out = []
        for d in divergences[:8]:
            p = runs["pristine"]["outputs"][d["request"]]
            x = runs["patched"]["outputs"][d["request"]]
            again = first_divergence(p["output_ids"], x["output_ids"])
            out.append(
                {
                    **d,
                    "diverges_again_at": again,
                    "pristine_margin": logit_margin(p.get("top_logprobs", []), d["position"]),
                }
            )
        return out

    def run_seed_case(self, next_n: int) -> None:
        """IndexShare on (GLM-5's flag): staggered arrivals and lengths, so batches merge and filter.
        Pristine and patched run the requests timed; then every engine runs them greedy with every
        draft position recorded, and the patched tree's draft positions are compared with its own
        eager draft-extend's (``patched_eager``): pristine 0.5.14 has no seed, so its drafts differ by
        design."""
        model_dir = engine_model.write_model(
            self.workdir / f"model-{self.args.layers}l-share", self.args.layers, index_share=True
        )
        engines = self.start_engines(model_dir, next_n, f"seed-n{next_n}", SEED_CASE_ENGINES, seed_sizing(self.sizing))
        try:
            requests = seed_requests()
            runs = {
                label: engines[label].call({"op": "generate", "requests": requests})
                for label in ("pristine", "patched")
            }
            greedy = {
                label: engine.call({"op": "generate", "requests": requests, "mode": {"record_positions": True}})
                for label, engine in engines.items()
            }
            self.seed_cases.append(seed_case_row(next_n, requests, runs, greedy, memory_of(engines)))
            self.save()
            case = self.seed_cases[-1]
            log(
                f"seed case n{next_n}: identical {case['tokens_identical']}, draft loops {case['draft_loops']}, "
                f"draft positions identical {case['draft_positions_identical']}"
            )
        finally:
            for engine in engines.values():
                engine.stop()


SEED_CASE_ENGINES = ("pristine", "patched", "patched_eager")
SEED_KV_TOKENS = 400_000  # the IndexShare case's 24 prompts of at most 8k, and their outputs, three runs over


def seed_sizing(sizing: Sizing) -> Sizing:
    """The IndexShare case's engines: the run's graphs and context, a KV pool for its own requests."""
    return Sizing(max_bs=sizing.max_bs, max_ctx=sizing.max_ctx, needed_kv_tokens=SEED_KV_TOKENS)


def seed_requests() -> list[dict]:
    rng = random.Random("seed-case")
    return [
        {
            "prompt": [200 + i, rng.randint(1024, 8192)],
            "max_new_tokens": rng.randint(8, 48),
            "delay_s": round(rng.uniform(0, 1.5), 3),
        }
        for i in range(24)
    ]


def seed_case_row(next_n: int, requests: list, runs: dict, greedy: dict, mem_gb: dict) -> dict:
    fraction, divergences = compare_outputs(runs["pristine"]["outputs"], runs["patched"]["outputs"])
    drafts = compare_draft_positions(greedy["patched_eager"], greedy["patched"])
    return {
        "next_n": next_n,
        "requests": len(requests),
        "arrivals_s": [0, 1.5],
        "new_tokens": [8, 48],
        "prompt_tokens": [1024, 8192],
        "tokens_identical": fraction,
        "divergences": divergences[:16],
        "draft_loops": {label: run.get("draft_loops") for label, run in runs.items()},
        "tpot_ms": {label: tpot_ms([run]) for label, run in runs.items()},
        "step_parts": {label: step_parts([run], None, 0) for label, run in runs.items()},
        "verify_forwards": {label: len(run.get("verify", [])) for label, run in runs.items()},
        "draft_positions": drafts,
        "draft_positions_identical": (drafts or {}).get("identical"),
        "draft_reference": "patched_eager: the patched tree, every draft-extend pass eager",
        "mem_gb": mem_gb,
    }


def memory_of(engines: dict) -> dict:
    return {label: engine_memory((engine.started or {}).get("info") or {}) for label, engine in engines.items()}


def interval(found: dict | None) -> str:
    """ratio_interval's 95% interval, as a case line shows it beside its ratio."""
    return f" [{found['ci95'][0]:.3f}-{found['ci95'][1]:.3f}]" if found else ""


def patched_only_line(row: dict, case: Case) -> str:
    """A --patched-only run's line per case: the patched engine's own figures, draft-extend's host time first."""
    x = row["patched"]
    extend = x["parts"].get("draft_extend") or {}
    return (
        f"n={row['next_n']} {case.name} (acceptance {row['simulated_acceptance'] or 'greedy'}), patched engine "
        f"alone: draft-extend host {fmt(extend.get('host_ms'), 2)} ms median, {fmt(extend.get('host_ms_max'), 2)} "
        f"max, GPU {fmt(extend.get('gpu_ms'), 2)} ms, graph {fmt(extend.get('graph'), 2)}; TPOT {fmt(x['tpot_ms'], 2)} "
        f"ms, step interval {fmt(x['step_interval_ms'], 2)} ms, tokens/s {fmt(x['tokens_per_s'])}, "
        f"accept length {fmt(row['accept_length'], 2)}, patched rows {x['layouts']}"
    )


def case_line(row: dict, case: Case) -> str:
    """One log line per case: the engines' figures side by side, with the floor beside each ratio."""
    if row.get("patched_only"):
        return patched_only_line(row, case)
    p, x = row["pristine"], row["patched"]
    aa = row["aa_noise_processes"] or row["aa_noise"] or {}

    def parts(part: str, what: str = "gpu_ms") -> str:
        return f"{fmt(part_value(p['parts'], part, what), 2)} -> {fmt(part_value(x['parts'], part, what), 2)}"

    return (
        f"n={row['next_n']} {case.name} (acceptance {row['simulated_acceptance'] or 'greedy'}): verify "
        f"{fmt(p['verify_step_us'])} -> {fmt(x['verify_step_us'])} us ({fmt(row['speedup_verify'], 3)}x, A/A "
        f"{fmt(aa.get('verify'), 3)}), TPOT {fmt(p['tpot_ms'], 2)} -> {fmt(x['tpot_ms'], 2)} ms "
        f"({fmt(row['speedup_tpot'], 3)}x, A/A {fmt(aa.get('tpot'), 3)} {row['aa_noise_kind']}; mean of runs "
        f"{fmt(row['speedup_tpot_mean_of_runs'], 3)}x{interval(row['speedup_tpot_mean_of_runs_interval'])}, A/A "
        f"{fmt(aa.get('tpot_mean_of_runs'), 3)}{interval(aa.get('tpot_mean_of_runs_interval'))}), "
        f"tokens/s {fmt(p['tokens_per_s'])} -> {fmt(x['tokens_per_s'])}, step GPU {parts('step')} ms "
        f"(A/A {fmt(aa.get('step_gpu'), 3)}), draft {parts('draft')}, verify part {parts('verify')}, "
        f"draft-extend {parts('draft_extend')} ms GPU, host gap {parts('step', 'host_gap_ms')} ms; "
        f"identical {row['tokens_identical']}, verify positions identical {row['verify_positions_identical']}, "
        f"draft positions identical {row.get('draft_positions_identical')}, patched rows {x['layouts']}"
        + (f", SM clock {fmt(p['sm_mhz'])} -> {fmt(x['sm_mhz'])} MHz" if p.get("sm_mhz") else "")
    )


def main(args: argparse.Namespace) -> int:
    """The run bench/engine_ab.py's command line asks for (``args.acceptance``, ``args.next_n`` and
    ``args.seed_case`` already parsed); 2, with one line, where it is refused before anything starts."""
    if args.patched_only and (args.two_process_aa or args.seed_case):
        both = "--two-process-aa" if args.two_process_aa else "--seed-case"
        return refuse(f"--patched-only runs the patched engine alone; {both} needs pristine engines beside it")
    env = dict(item.split("=", 1) for item in args.env)
    if args.same_layout:
        env.setdefault("PYTHONHASHSEED", "0")
    overrides = {
        **KV_CACHES[args.kv_cache],
        **{k: json.loads(v) for k, v in (item.split("=", 1) for item in args.engine_arg)},
    }
    sizing = sizing_for(GRIDS[args.grid], args.new_tokens, args.reps)
    if int(overrides.get("max_total_tokens", sizing.kv_tokens)) < sizing.needed_kv_tokens:
        return refuse(
            f"--grid {args.grid} needs max_total_tokens >= {sizing.needed_kv_tokens} per engine (its prompt "
            f"pool and outputs); {overrides['max_total_tokens']} would evict pool prompts between runs"
        )
    labels = ("pristine", "pristine_b", "patched") if args.two_process_aa else ("pristine", "patched")
    labels = ("patched",) if args.patched_only else labels
    memory_plan = fit_check(args, overrides, sizing, len(labels))
    seed_plan = fit_check(args, overrides, seed_sizing(sizing), len(SEED_CASE_ENGINES)) if args.seed_case else None
    for plan, what in ((memory_plan, f"--grid {args.grid}"), (seed_plan, "--seed-case")):
        if plan and memory.refusal(plan, what):
            return refuse(memory.refusal(plan, what))
    if args.check_memory:
        print(json.dumps({"memory_plan": memory_plan, "memory_plan_seed_case": seed_plan}, indent=1))
        return 0
    cap = memory.logits_cap(memory_plan, engine_args(Path("MODEL"), 0, sizing, overrides))
    capped = cap is not None and memory.LOGITS_FRACTION_ENV not in env  # the command line's own --env wins
    if capped:
        env[memory.LOGITS_FRACTION_ENV] = cap[0]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sglpatch-engine-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        **run_meta(args, env, overrides, sizing, labels),
        "memory_plan": memory_plan,
        "memory_plan_seed_case": seed_plan,
    }
    bench = Bench(args, meta, sizing, overrides, args.acceptance, labels, workdir, time.time() + args.deadline_s)
    if args.patched_only:
        bench.note(PATCHED_ONLY_NOTE)
    elif meta["patched_is_pristine"]:
        bench.note(
            "A/A call: the engine labelled patched runs the pristine tree (--patched is --pristine), so each row's "
            "patched/pristine ratios are a floor of two pristine processes, with every run of the call in them"
        )
    if memory.tight(memory_plan):
        bench.note(memory.tight(memory_plan))
    if capped:
        bench.note(cap[1])
    bench.save()
    return bench.run(args.next_n, args.seed_case, GRIDS[args.grid])


def fit_check(args: argparse.Namespace, overrides: dict, sizing: Sizing, engines: int) -> dict:
    """The run's memory plan (bench/engine/memory.py), on the GPU's own size unless the command line
    gives one; not checked across GPUs (tensor or data parallel runs)."""
    if parallel_label(overrides) != "tp1":
        return {"fits": None, "not_checked": f"{parallel_label(overrides)}: one GPU's estimate does not hold"}
    gpu_gib = args.gpu_memory_gib if args.gpu_memory_gib is not None else memory.gpu_memory_gib()
    one = engine_args(Path("MODEL"), max(args.next_n, default=2), sizing, overrides)
    return memory.plan(one, engine_model.dsa_config(args.layers), engines, gpu_gib)


def run_meta(args: argparse.Namespace, env: dict, overrides: dict, sizing: Sizing, labels: tuple) -> dict:
    """What the run's JSON says about how it ran (every row's labels come from it)."""
    return {
        "line": args.line,
        "command": args.command or " ".join(sys.argv),
        "model": engine_model.dsa_config(args.layers),
        "engine_args": engine_args(Path("MODEL"), 0, sizing, overrides),
        "parallel": parallel_label(overrides),
        "series": json.loads(args.series_record.read_text()) if args.series_record else None,
        "grid": args.grid,
        "engines": list(labels),
        "patched_only": args.patched_only,
        **({"patched_only_note": PATCHED_ONLY_NOTE} if args.patched_only else {}),
        "acceptance": {str(k): v for k, v in args.acceptance.items()},
        "pinned_cpus": args.pin_cpus,
        "same_layout": args.same_layout,
        "patched_is_pristine": args.patched.resolve() == args.pristine.resolve(),
        "physical_cores": {
            str(cpu): list(core) for cpu, core in physical_cores(sorted(os.sched_getaffinity(0))).items()
        },
        "reps": args.reps,
        "skip_steps": args.skip,
        "new_tokens": args.new_tokens,
        "env": env,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in (
        "torch",
        "sgl-deep-gemm",
        "sglang-kernel",
        "sgl-flash-mla",
        "flashinfer-python",
        "triton",
        "transformers",
        "xgrammar",
    ):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:
        out["gpu"] = None
    return out


def refuse(message: str) -> int:
    print(f"engine_ab: {message}", file=sys.stderr)
    return 2
