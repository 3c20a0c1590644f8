"""Two top-k results of the indexer step compared row by row, as sets, with every difference explained
or counted: a tie at the boundary, a near-tie (logits in another summation order), a row the top-k
kernel itself did not get exact (same logits on both sides), or a mismatch. The comparison checks
itself too: a top-k row changed on purpose must come out as a mismatch."""

from __future__ import annotations

from bench.indexer.fixture import PAGE

# Logits computed in another fp32 summation order are not bit-identical; a top-k entry swapped
# within this relative distance of the row's k-th logit is a near-tie, counted apart from exact ties.
NEAR_TIE_REL = 1e-5
NO_SLOT_TO_SWAP = "no slot to swap in"


def to_positions(torch, slot_pos, entries):
    """Top-k entries -> key positions: slots (fused PAGED transform) map through slot_pos;
    ``slot_pos=None`` means the entries already are positions (unfused top-k)."""
    t = torch.as_tensor(entries, dtype=torch.int64)
    if slot_pos is None:
        return t
    return slot_pos[t.to(slot_pos.device)]


def compare_topk(torch, ref, got, logits, slot_pos, next_n, lengths, got_logits=None):
    """Compare two top-k results row by row, as sets.

    A differing row is
    - a tie when every differing entry's logit (under ``logits``, the reference's) equals the
      row's k-th largest kept logit;
    - explained by the top-k kernel when the reference result is not an exact top-k of its own
      logits, and the other side's logits (``got_logits``, when given) are bit-identical to the
      reference's on that row: the inputs agree and the top-k kernel itself did not return the
      exact top-k (there is then no single right answer to be identical to);
    - a mismatch otherwise.
    Returns dict(rows, identical_rows, tie_rows, explained_rows, mismatch_rows, first_mismatch,
    explained)."""
    a = torch.sort(ref, dim=-1).values
    b = torch.sort(got, dim=-1).values
    same = (a == b).all(dim=-1)
    res = dict(
        rows=int(ref.shape[0]),
        identical_rows=int(same.sum()),
        tie_rows=0,
        near_tie_rows=0,
        explained_rows=0,
        mismatch_rows=0,
        first_mismatch=None,
        explained=[],
    )
    bad = torch.nonzero(~same).flatten().tolist()
    for row in bad:
        ra, rb = set(a[row].tolist()), set(b[row].tolist())
        diff = (ra ^ rb) - {-1}
        if logits is None or -1 in (ra ^ rb):
            res["mismatch_rows"] += 1
            res["first_mismatch"] = res["first_mismatch"] or dict(
                row=row, diff=len(diff), reason="no logits or padding"
            )
            continue
        valid = lengths[row // next_n] - next_n + 1 + row % next_n
        kept = [s for s in ra if s >= 0]
        pos_kept = to_positions(torch, slot_pos, kept).to(logits.device)
        boundary = logits[row, pos_kept].min().item()
        pos_diff = to_positions(torch, slot_pos, sorted(diff)).to(logits.device)
        if bool((pos_diff < 0).any()) or bool((pos_diff >= valid).any()):
            res["mismatch_rows"] += 1
            res["first_mismatch"] = res["first_mismatch"] or dict(row=row, diff=len(diff), reason="slot outside row")
            continue
        vals = logits[row, pos_diff]
        if bool((vals == boundary).all()):
            res["tie_rows"] += 1
            continue
        same_logits = None
        if got_logits is not None:
            same_logits = torch.equal(logits[row, :valid], got_logits[row, :valid])
        tol = NEAR_TIE_REL * max(1.0, abs(boundary))
        if same_logits is False and bool(((vals - boundary).abs() <= tol).all()):
            res["near_tie_rows"] += 1
            continue
        ref_exact = exact_topk(torch, ref[row], logits[row], slot_pos, valid)
        got_exact = exact_topk(torch, got[row], logits[row], slot_pos, valid)
        evidence = dict(
            row=row,
            differing_entries=len(diff),
            reference_exact_topk=ref_exact,
            other_exact_topk=got_exact,
            logits_bit_identical=same_logits,
        )
        # Only when the reference itself is not an exact top-k of its own logits: a correct
        # reference that the other side misses is a mismatch, whatever the reason.
        if not ref_exact and same_logits is not False:
            res["explained_rows"] += 1
            res["explained"].append(evidence)
        else:
            res["mismatch_rows"] += 1
            evidence.update(boundary=boundary, values=vals[:8].tolist())
            res["first_mismatch"] = res["first_mismatch"] or evidence
    return res


def logits_bit_identical(torch, a, b, next_n, lengths):
    """Are two [tokens, width] logits tensors bit-identical on every position a token may see?"""
    if a is None or b is None:
        return None
    valid = torch.tensor(
        [L - next_n + 1 + j for L in lengths for j in range(next_n)], device=a.device, dtype=torch.int64
    )
    width = min(a.shape[1], b.shape[1])
    mask = torch.arange(width, device=a.device)[None, :] < valid[:, None]
    return bool(((a[:, :width] == b[:, :width]) | ~mask).all())


def same_sets_rows(torch, x, y):
    """How many rows of two top-k results differ as sets."""
    return int((torch.sort(x, dim=-1).values != torch.sort(y, dim=-1).values).any(dim=-1).sum())


def sensitivity_check(torch, ref, slot_pos, next_n, lengths):
    """The comparison must catch a changed top-k: swap one kept index of row 0 for a slot of the
    same request that the row did not keep, and expect a mismatch (not a tie, not equal)."""
    topk = ref["topk"]
    row = topk[0]
    kept = set(row.tolist())
    valid = lengths[0] - next_n + 1
    if slot_pos is None:  # entries are positions
        own = list(range(valid))
    else:  # entries are slots: request 0's pages, as row 0 kept them
        own = ref_slots(torch, slot_pos, topk, 0)
    pos = to_positions(torch, slot_pos, own).tolist() if own else []
    candidates = [s for s, p in zip(own, pos, strict=True) if s not in kept and 0 <= p < valid]
    if not candidates or (row < 0).all():
        return dict(detected=False, reason=NO_SLOT_TO_SWAP)
    bad = topk.clone()
    j = int(torch.nonzero(row >= 0)[0])
    bad[0, j] = candidates[0]
    res = compare_topk(torch, topk, bad, ref["logits"], slot_pos, next_n, lengths)
    return dict(detected=res["mismatch_rows"] == 1 and res["tie_rows"] == 0, result=res)


def ref_slots(torch, slot_pos, topk, row):
    """Slots of the request that ``row`` belongs to: those whose kept entries share its pages."""
    pages = set((topk[row][topk[row] >= 0] // PAGE).tolist())
    return [p * PAGE + o for p in sorted(pages) for o in range(PAGE)]


def exact_topk(torch, entries, logits_row, slot_pos, valid):
    """Is ``entries`` an exact top-k of logits_row[:valid] (ties at the boundary allowed)?"""
    kept = [e for e in entries.tolist() if e >= 0]
    if not kept:
        return valid == 0
    vals = logits_row[:valid]
    k = len(kept)
    kth = torch.topk(vals, k).values[-1]
    pos = to_positions(torch, slot_pos, kept).to(vals.device)
    if bool((pos < 0).any()) or bool((pos >= valid).any()):
        return False
    mask = torch.zeros(valid, dtype=torch.bool, device=vals.device)
    mask[pos] = True
    return bool((vals[mask] >= kth).all()) and bool((vals[~mask] <= kth).all())


def graph_vs_eager(torch, refs, slot_pos, next_n, lengths):
    """Per-token top-k: CUDA graph vs eager, with which side is an exact top-k of its own logits
    for every row where they differ, and how far the two logits rows are apart there."""
    e, g = refs["eager"], refs["graph"]
    res = compare_topk(torch, e["topk"], g["topk"], e["logits"], slot_pos, next_n, lengths, got_logits=g["logits"])
    a = torch.sort(e["topk"], dim=-1).values
    b = torch.sort(g["topk"], dim=-1).values
    rows = torch.nonzero(~(a == b).all(dim=-1)).flatten().tolist()
    detail = []
    for row in rows[:8]:
        valid = lengths[row // next_n] - next_n + 1 + row % next_n
        d = dict(row=row, valid=valid)
        d["eager_exact"] = exact_topk(torch, e["topk"][row], e["logits"][row], slot_pos, valid)
        if g["logits"] is not None:
            d["graph_exact"] = exact_topk(torch, g["topk"][row], g["logits"][row], slot_pos, valid)
            d["logits_max_abs_diff"] = float((e["logits"][row, :valid] - g["logits"][row, :valid]).abs().max())
        detail.append(d)
    res["rows_detail"] = detail
    return res


def merge_cmp(items):
    keys = ("rows", "identical_rows", "tie_rows", "near_tie_rows", "explained_rows", "mismatch_rows")
    out = {k: 0 for k in keys}
    out["first_mismatch"] = None
    for it in items:
        for k in keys:
            out[k] += it[k]
        out["first_mismatch"] = out["first_mismatch"] or it["first_mismatch"]
    return out
