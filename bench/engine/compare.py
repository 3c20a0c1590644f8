"""Two engines' greedy answers compared: the output tokens of every request, the target's verdict at
every verify position (the probe's ``positions`` records: argmax, top-1 minus top-2 margin and the
row's logit sum of every next_n position of every request, forward by forward), and the draft
model's at every draft position (its ``draft_positions`` records, request by request)."""

from __future__ import annotations

from collections import Counter

from bench.engine_worker import request_index

NEAR_TIE = 0.05  # top-1 minus top-2 logit below this: a flip there is rounding, not a different answer


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_outputs(reference: list[dict], candidate: list[dict]) -> tuple[float, list[dict]]:
    """Fraction of requests with identical output ids, and each divergence's first position."""
    same, divergences = 0, []
    for i, (r, c) in enumerate(zip(reference, candidate, strict=False)):
        pos = first_divergence(r["output_ids"], c["output_ids"])
        if pos is None:
            same += 1
        else:
            divergences.append({"request": i, "position": pos})
    return (same / len(reference) if reference else 0.0), divergences


def logit_margin(top_logprobs: list, position: int) -> float | None:
    """The target's top-1 minus top-2 logprob at ``position`` (from a run with top-2 logprobs)."""
    if position >= len(top_logprobs) or len(top_logprobs[position]) < 2:
        return None
    (lp1, _), (lp2, _) = top_logprobs[position][:2]
    return lp1 - lp2


def compare_positions(reference: dict, candidate: dict, batch_size: int) -> dict | None:
    """The target's verdict at every verify position of two greedy runs, forward by forward (the
    probe's positions records at ``batch_size``, in launch order): how many positions, how many
    with the same argmax, how many rows with bit-identical logits (their sums), and each argmax
    difference with both margins; a difference where either margin is below ``NEAR_TIE`` counts
    as a near-tie."""

    def forwards(run):
        return sorted((r for r in run.get("positions", []) if r["batch_size"] == batch_size), key=lambda r: r["t"])

    ref, cand = forwards(reference), forwards(candidate)
    if not ref or not cand:
        return None
    positions = same = same_logits = near_ties = 0
    differences = []
    for step, (a, b) in enumerate(zip(ref, cand, strict=False)):
        for row, (ia, ib) in enumerate(zip(a["argmax"], b["argmax"], strict=False)):
            positions += 1
            same_logits += a["logit_sum"][row] == b["logit_sum"][row]
            if ia == ib:
                same += 1
                continue
            tie = min(a["margin"][row], b["margin"][row]) < NEAR_TIE
            near_ties += tie
            differences.append(
                {"forward": step, "row": row, "margins": [a["margin"][row], b["margin"][row]], "near_tie": tie}
            )
    return {
        "forwards": [len(ref), len(cand)],
        "positions": positions,
        "identical": same / positions if positions else None,
        "logits_identical": same_logits / positions if positions else None,
        "near_ties": near_ties,
        "differences": differences[:16],
    }


def draft_steps(run: dict) -> dict:
    """(kind, request, step) -> (argmax per position, margin per position) from a greedy run's draft
    records, each request's own steps counted in order: ``extend`` (a decode step's draft-extend: the
    next draft's position 0), ``loop`` (a draft loop: positions 1..), ``prefill_extend`` (the first
    draft's position 0, the last chunk's where a prompt was prefilled in several). Keyed by request, so
    two engines whose batches merged at other moments still compare step for step."""
    steps, seen = {}, Counter()
    for record in sorted(run.get("draft_positions", []), key=lambda r: r["t"]):
        kind = record["kind"]
        for row, rid in enumerate(record["rids"]):
            request = request_index(rid)
            if request is None:
                continue
            step = 0 if kind == "prefill_extend" else seen[kind, request]
            seen[kind, request] += 1
            steps[kind, request, step] = (record["argmax"][row], record["margin"][row])
    return steps


def compare_draft_positions(reference: dict, candidate: dict) -> dict | None:
    """The draft model's argmax at every draft position of two greedy runs, step by step of each
    request: how many positions, how many the same, how many of the differences are near-ties (either
    margin below ``NEAR_TIE``), per kind of step, and the first differences with both margins; steps
    that only one run has are counted apart (``unmatched_steps``)."""
    ref, cand = draft_steps(reference), draft_steps(candidate)
    if not ref or not cand:
        return None
    positions = same = near_ties = 0
    by_kind, differences = {}, []
    for key in sorted(ref.keys() & cand.keys()):
        kind, request, step = key
        (argmax_a, margin_a), (argmax_b, margin_b) = ref[key], cand[key]
        counts = by_kind.setdefault(kind, {"positions": 0, "different": 0})
        for i, (a, b) in enumerate(zip(argmax_a, argmax_b, strict=False)):
            positions += 1
            counts["positions"] += 1
            if a == b:
                same += 1
                continue
            counts["different"] += 1
            tie = min(margin_a[i], margin_b[i]) < NEAR_TIE
            near_ties += tie
            position = i + 1 if kind == "loop" else 0
            differences.append(
                {
                    "kind": kind,
                    "request": request,
                    "step": step,
                    "draft_position": position,
                    "margins": [margin_a[i], margin_b[i]],
                    "near_tie": tie,
                }
            )
    errors = [r for run in (reference, candidate) for r in run.get("draft_positions", []) if r["kind"] == "error"]
    return {
        "steps": [len(ref), len(cand)],
        "unmatched_steps": len(ref.keys() ^ cand.keys()),
        "record_errors": [r["error"] for r in errors][:4],
        "positions": positions,
        "identical": same / positions if positions else None,
        "near_ties": near_ties,
        "by_kind": by_kind,
        "differences": differences[:16],
    }
