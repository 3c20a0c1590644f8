"""A randomised interleaving model of the barrier protocol of docs/results/paged_mqa_pingpong_candidate.patch.

The candidate (DeepGEMM's SM90 paged-MQA kernel, a third patch on the line) runs, from next_n 3 on, one CTA of
one TMA warp and G = ceil(next_n / 2) math warp-groups (one KV lane). Each warp-group keeps two accumulator
sets ("slots"): it issues the WGMMA of the next KV tile into one slot, then waits until at most one WGMMA group
is in flight (wgmma.wait_group 1) and runs the epilogue of the other slot. What this models, as the kernel
writes it (sm90_fp8_paged_mqa_logits.cuh with the patch: the TMA branch and `run_pipelined`):

- the scheduler's task list of one CTA: consecutive (request, KV block) pairs from a start to an end that may
  fall inside a request, ragged lengths (1 to 5 blocks; the last block of a request is partial in the kernel,
  which changes nothing here: the tile is loaded and computed whole, the caller masks the tail);
- TMA (one elected thread): the first Q before the loop; at each change of request, when request q + 1 has
  blocks in the CTA's range (`exist_q_atom_idx`), wait empty_q of the next Q stage (parity ^ 1) and load Q and
  weights of q + 1 there; per task, wait empty_kv (parity ^ 1) and load the tile and its scales (an async
  copy that lands at a random later time, then completes the full barrier's transaction count);
- math warp-group g (one agent for its 128 threads: they arrive together, 128 arrivals): per tile
  `next_tile` (at a change of request: remember the previous Q stage for release, wait full_q; wait
  full_kv), `issue` (the WGMMA reads the KV stage and the Q stage until it completes; completion happens at
  a random later time, in order per warp-group), `finish<slot, n>` (wait until at most n groups are in
  flight; the slot's WGMMA must be complete; read the KV scales; arrive at empty_kv; read the weights from
  the slot's Q stage; write the logits of the tile's tokens; release the previous request's Q stage once
  the slot holding its last tile is finished). An odd next_n's last warp-group holds one token and runs the
  same protocol;
- mbarriers: an arrival count, a transaction count (which may go negative when a copy lands before its
  arrive_and_expect_tx) and a phase bit; `try_wait.parity(p)` passes once the phase differs from p.

Checked in every schedule: no deadlock (every agent and every copy finishes), every read sees the tile or the
request it should (a WGMMA at issue and at completion, the scales, the weights), no copy lands on a stage that
a reader still holds, and each (task, warp-group) is computed exactly once. `--mutants` runs the same
schedules with one mistake planted at a time and counts the schedules that catch each.

    python bench/studies/paged_mqa_pingpong_model.py [--schedules N] [--mutants]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field

Q_STAGES, KV_STAGES = 3, 5
THREADS = 128  # per warp-group

# One planted mistake each; "" is the candidate as written
MUTANTS = {
    "kv_count_one_group": "empty_kv counts one warp-group's 128 arrivals, not 128 x G",
    "kv_release_at_issue": "empty_kv arrived at when the WGMMA is issued, not after wait_group",
    "q_release_at_change": "the previous Q stage released at the change of request (patch 2's place), not after "
    "the epilogue of its last tile",
    "finish_newer_slot": "after wait_group 1 the epilogue runs on the slot just issued, not the older one",
    "tma_empty_parity": "the TMA waits empty_kv with the phase's parity, not parity ^ 1",
    "q_prefetch_no_wait": "the TMA loads the next Q without waiting for its stage's release",
    "single_token_no_q_release": "an odd next_n's one-token warp-group never releases a Q stage",
}


class Violation(Exception):
    pass


class Bar:
    def __init__(self, count: int):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _settle(self) -> None:
        if self.pending < 0:
            raise Violation("more arrivals than the barrier's count in one phase")
        if self.pending == 0 and self.tx == 0:
            self.phase ^= 1
            self.pending = self.count

    def arrive(self, n: int = 1, expect_tx: int = 0) -> None:
        self.tx += expect_tx
        self.pending -= n
        self._settle()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._settle()

    def passed(self, parity: int) -> bool:
        return self.phase != parity


@dataclass
class Cta:
    tasks: list  # (request, kv block)
    groups: int  # math warp-groups
    tokens: list  # tokens per warp-group
    end: tuple  # (end request, end kv) of the schedule entry
    mutant: str = ""
    full_kv: list = field(default_factory=list)
    empty_kv: list = field(default_factory=list)
    full_q: list = field(default_factory=list)
    empty_q: list = field(default_factory=list)
    smem_kv: list = field(default_factory=list)
    smem_q: list = field(default_factory=list)
    kv_readers: list = field(default_factory=list)  # per stage: set of (group, task) holding it
    q_readers: list = field(default_factory=list)  # per stage: set of (group, request)
    copies: list = field(default_factory=list)  # in flight: (kind, stage, value)
    wgmma: list = field(default_factory=list)  # per group: in-flight groups [(slot, task, kv stage, q stage, request)]
    done: dict = field(default_factory=dict)

    def __post_init__(self):
        empty_kv_count = THREADS * (1 if self.mutant == "kv_count_one_group" else self.groups)
        self.full_kv = [Bar(1) for _ in range(KV_STAGES)]
        self.empty_kv = [Bar(empty_kv_count) for _ in range(KV_STAGES)]
        self.full_q = [Bar(1) for _ in range(Q_STAGES)]
        self.empty_q = [Bar(THREADS * self.groups) for _ in range(Q_STAGES)]
        self.smem_kv, self.smem_q = [None] * KV_STAGES, [None] * Q_STAGES
        self.kv_readers = [set() for _ in range(KV_STAGES)]
        self.q_readers = [set() for _ in range(Q_STAGES)]
        self.wgmma = [[] for _ in range(self.groups)]

    def exists(self, request: int) -> bool:  # the scheduler's exist_q_atom_idx
        end_q, end_kv = self.end
        return request < end_q or (request == end_q and end_kv > 0)

    # -- the TMA warp --
    def tma(self):
        if not self.tasks:
            return
        self._load_q(0, self.tasks[0][0])
        q_iter, kv_iter, current = 1, 0, None
        for t, (request, _) in enumerate(self.tasks):
            if request != current and self.exists(request + 1):
                stage, phase = q_iter % Q_STAGES, (q_iter // Q_STAGES) & 1
                q_iter += 1
                if self.mutant != "q_prefetch_no_wait":
                    while not self.empty_q[stage].passed(phase ^ 1):
                        yield
                self._load_q(stage, request + 1)
            current = request
            stage, phase = kv_iter % KV_STAGES, (kv_iter // KV_STAGES) & 1
            kv_iter += 1
            wanted = phase if self.mutant == "tma_empty_parity" else phase ^ 1
            while not self.empty_kv[stage].passed(wanted):
                yield
            self.copies.append(("kv", stage, t))
            self.full_kv[stage].arrive(1, expect_tx=1)
            yield

    def _load_q(self, stage: int, request: int) -> None:
        self.copies.append(("q", stage, request))
        self.full_q[stage].arrive(1, expect_tx=1)

    def land(self, rng: random.Random) -> None:
        kind, stage, value = self.copies.pop(rng.randrange(len(self.copies)))
        readers = (self.kv_readers if kind == "kv" else self.q_readers)[stage]
        if readers:
            raise Violation(f"{kind} copy of {value} lands on stage {stage} while {sorted(readers)} still read it")
        if kind == "kv":
            self.smem_kv[stage] = value
            self.full_kv[stage].complete_tx(1)
        else:
            self.smem_q[stage] = value
            self.full_q[stage].complete_tx(1)

    def complete_wgmma(self, g: int) -> None:  # the oldest group in flight finishes
        slot, t, kv_stage, q_stage, request = self.wgmma[g].pop(0)
        if self.smem_kv[kv_stage] != t or self.smem_q[q_stage] != request:
            raise Violation(f"group {g}: the WGMMA of task {t} read a stage refilled while it ran")

    # -- a math warp-group: run_pipelined --
    def math(self, g: int):
        single = self.tokens[g] == 1
        st = {"q": None, "q_iter": 0, "kv_iter": 0, "q_stage": None, "release": None, "t": 0, "cur": None}
        slots = [None, None]

        def next_tile():
            if st["t"] == len(self.tasks):
                return False
            t = st["t"]
            st["t"] += 1
            request = self.tasks[t][0]
            if request != st["q"]:
                if st["q_iter"] > 0:
                    if self.mutant == "q_release_at_change":
                        self._release_q(g, st["q_stage"], single)
                    else:
                        st["release"] = st["q_stage"]
                stage, phase = st["q_iter"] % Q_STAGES, (st["q_iter"] // Q_STAGES) & 1
                st["q_iter"] += 1
                while not self.full_q[stage].passed(phase):
                    yield
                if self.smem_q[stage] != request:
                    raise Violation(f"group {g}: Q stage {stage} holds request {self.smem_q[stage]}, wants {request}")
                self.q_readers[stage].add((g, request))
                st["q_stage"] = stage
            st["q"] = request
            stage, phase = st["kv_iter"] % KV_STAGES, (st["kv_iter"] // KV_STAGES) & 1
            st["kv_iter"] += 1
            while not self.full_kv[stage].passed(phase):
                yield
            if self.smem_kv[stage] != t:
                raise Violation(f"group {g}: KV stage {stage} holds task {self.smem_kv[stage]}, wants {t}")
            st["cur"] = (t, stage, st["q_stage"], request)
            return True

        def issue(slot):
            t, kv_stage, q_stage, request = st["cur"]
            slots[slot] = st["cur"]
            self.kv_readers[kv_stage].add((g, t))
            self.wgmma[g].append((slot, t, kv_stage, q_stage, request))
            if self.mutant == "kv_release_at_issue":
                self.kv_readers[kv_stage].discard((g, t))
                self.empty_kv[kv_stage].arrive(THREADS)

        def finish(slot, in_flight):
            if self.mutant == "finish_newer_slot" and in_flight == 1:
                slot ^= 1
            while len(self.wgmma[g]) > in_flight:
                yield
            t, kv_stage, q_stage, request = slots[slot]
            if any(w[1] == t for w in self.wgmma[g]):
                raise Violation(f"group {g}: epilogue of task {t} reads accumulators its WGMMA has not finished")
            if self.smem_kv[kv_stage] != t:
                raise Violation(f"group {g}: scales of task {t} read from a refilled KV stage")
            if self.mutant != "kv_release_at_issue":
                self.kv_readers[kv_stage].discard((g, t))
                self.empty_kv[kv_stage].arrive(THREADS)
            yield  # the epilogue's arithmetic
            if self.smem_q[q_stage] != request:
                raise Violation(f"group {g}: weights of request {request} read from a refilled Q stage")
            key = (t, g)
            if key in self.done:
                raise Violation(f"task {t} computed twice by group {g}")
            self.done[key] = request
            other = slots[slot ^ 1]
            if st["release"] is not None and (other is None or st["release"] != other[2]):
                self._release_q(g, st["release"], single)
                st["release"] = None

        if not (yield from next_tile()):
            return
        issue(0)
        while True:
            if not (yield from next_tile()):
                yield from finish(0, 0)
                break
            issue(1)
            yield from finish(0, 1)
            if not (yield from next_tile()):
                yield from finish(1, 0)
                break
            issue(0)
            yield from finish(1, 1)

    def _release_q(self, g: int, stage: int, single: bool) -> None:
        self.q_readers[stage] = {r for r in self.q_readers[stage] if r[0] != g}
        if single and self.mutant == "single_token_no_q_release":
            return
        self.empty_q[stage].arrive(THREADS)


def run(tasks, end, next_n: int, seed: int, mutant: str = "") -> str:
    """One schedule: 'ok', or what went wrong."""
    groups = (next_n + 1) // 2
    tokens = [2] * (groups - 1) + [next_n - 2 * (groups - 1)]
    cta = Cta(tasks, groups, tokens, end, mutant)
    rng = random.Random(seed)
    agents = {"tma": cta.tma(), **{f"math{g}": cta.math(g) for g in range(groups)}}
    idle = 0
    try:
        while agents or cta.copies or any(cta.wgmma):
            r = rng.random()
            moved = False
            if cta.copies and r < 0.25:
                cta.land(rng)
                moved = True
            elif r < 0.45 and any(cta.wgmma):
                cta.complete_wgmma(rng.choice([g for g in range(groups) if cta.wgmma[g]]))
                moved = True
            elif agents:
                name = rng.choice(sorted(agents))
                try:
                    next(agents[name])
                except StopIteration:
                    del agents[name]
                    moved = True
            idle = 0 if moved else idle + 1
            if idle > 5000 and not cta.copies and not any(cta.wgmma):
                return f"deadlock: {sorted(agents)} wait"
    except Violation as exc:
        return str(exc)
    expected = {(t, g) for t in range(len(tasks)) for g in range(groups)}
    if set(cta.done) != expected:
        return f"{len(expected - set(cta.done))} (task, group) pairs never computed"
    return "ok"


def schedule(rng: random.Random):
    """One CTA's schedule entry: requests with ragged block counts, a start and an end anywhere in them."""
    blocks = [rng.randint(1, 5) for _ in range(rng.randint(1, 7))]
    flat = [(q, kv) for q, n in enumerate(blocks) for kv in range(n)]
    start = rng.randrange(len(flat))
    stop = rng.randint(start, len(flat))  # exclusive; may be the first block of a later request
    end = flat[stop] if stop < len(flat) else (len(blocks), 0)
    return flat[start:stop], end


def sweep(schedules: int, mutant: str = "", seed: int = 1) -> tuple[int, list]:
    rng = random.Random(seed)
    failures = []
    for i in range(schedules):
        tasks, end = schedule(rng)
        next_n = rng.choice([3, 4, 5, 6])
        verdict = run(tasks, end, next_n, seed=i, mutant=mutant)
        if verdict != "ok":
            failures.append((i, next_n, tasks, verdict))
    return schedules, failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--mutants", action="store_true", help="also run each planted mistake")
    args = parser.parse_args(argv)
    n, failures = sweep(args.schedules)
    print(f"candidate: {n} schedules, {len(failures)} failures")
    for f in failures[:5]:
        print("  ", f)
    status = 1 if failures else 0
    if args.mutants:
        for name, what in MUTANTS.items():
            n, caught = sweep(args.schedules, name)
            print(f"mutant {name} ({what}): caught in {len(caught)} of {n}; first: {caught[0][3] if caught else '-'}")
            status |= 0 if caught else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
