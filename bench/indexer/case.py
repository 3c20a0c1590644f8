"""One case of the indexer step: its variants (forced per-token, and the layout the backend chooses on
a patched tree), eager or captured in a CUDA graph and replayed with new lengths, timed in turn and
compared into one row."""

from __future__ import annotations

import statistics

from bench.indexer.fixture import PAGE, CapturedStep, _sync, forced_per_token, layout_of
from bench.indexer.grids import capture_lengths, case_seed, make_lengths
from bench.indexer.topk_compare import compare_topk, logits_bit_identical, merge_cmp, same_sets_rows


def time_fn(torch, fn, iters, reps):
    """Median microseconds per call of fn (a graph replay or an eager step)."""
    return time_interleaved(torch, [fn], iters, reps)[0]


def time_interleaved(torch, fns, iters, reps):
    """Median microseconds per call of each fn, their samples taken in turn (a, b, a, b, ...) so
    that clock or thermal drift during the run falls on all of them alike."""
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, samples, strict=True):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1000.0 / iters)
    return [statistics.median(s) for s in samples]


def eager_variant(fx, next_n, lengths, forced, seed, keep_logits=False):
    """Top-k, layout and logits of one eager step for one variant (forced per-token or chosen)."""
    backend = fx.backends[(next_n, forced)]
    with forced_per_token(forced):
        q_fp8, weights = fx.queries(len(lengths) * next_n, seed)
        first_call = len(fx.calls.logits_calls)
        fb = fx.forward_batch(lengths, next_n)
        backend.init_forward_metadata(fb)
        layout = layout_of(backend, next_n)
        topk = fx.step(backend, fb, q_fp8, weights).clone()
        logits = fx.calls.last_logits if keep_logits else None
        kernel_q = [c["q"] for c in fx.calls.logits_calls[first_call:]]
    return dict(
        topk=topk,
        layout=layout,
        logits=logits,
        kernel_q=kernel_q[-1] if kernel_q else None,
        run=(lambda: fx.step(backend, fb, q_fp8, weights)),
    )


class GraphVariant:
    """One variant's indexer step captured in a CUDA graph with other lengths (the backend's capture
    path), then replayed with the case's own (its replay path). Kept alive for interleaved timing."""

    def __init__(self, fx, next_n, lengths, forced, seed):
        torch = fx.torch
        backend = fx.backends[(next_n, forced)]
        with forced_per_token(forced):
            q_fp8, weights = fx.queries(len(lengths) * next_n, seed)
            first_call = len(fx.calls.logits_calls)
            fb_cap = fx.forward_batch(capture_lengths(lengths, next_n), next_n)
            backend.init_forward_metadata_out_graph(fb_cap, in_capture=True)
            self.q_static, self.w_static = torch.zeros_like(q_fp8), torch.zeros_like(weights)
            self.step = CapturedStep(torch, lambda: fx.step(backend, fb_cap, self.q_static, self.w_static))
            self.graph_logits = fx.calls.last_logits  # the captured kernel's output buffer
            fb = fx.forward_batch(lengths, next_n)
            backend.init_forward_metadata_out_graph(fb)
            self.layout = layout_of(backend, next_n)
            self.q_static.copy_(q_fp8)
            self.w_static.copy_(weights)
            self.step.replay()
            _sync(torch, fx.device)
            self.topk = self.step.out.clone()
            self.logits = None if self.graph_logits is None else self.graph_logits.clone()
            self.unstable_rows = 0  # the same replay again: the same top-k every time?
            for _ in range(2):
                self.step.replay()
                _sync(torch, fx.device)
                self.unstable_rows = max(self.unstable_rows, same_sets_rows(torch, self.step.out, self.topk))
            kernel_q = [c["q"] for c in fx.calls.logits_calls[first_call:]]
            self.kernel_q = kernel_q[-1] if kernel_q else None
            self.block_table_width = backend.forward_metadata.real_page_table.shape[1] * PAGE

    def replay(self):
        self.step.replay()


def graph_variants(fx, next_n, lengths, seed, timing, args, patched) -> dict:
    """Both variants captured and replayed, timed in turn: their top-k, logits, layouts and widths."""
    pt = GraphVariant(fx, next_n, lengths, True, seed)
    ch = GraphVariant(fx, next_n, lengths, False, seed) if patched else pt
    return {
        "us": time_interleaved(fx.torch, [pt.replay, ch.replay], args.iters, args.reps) if timing else [None, None],
        "refs": {"per_token": {"topk": pt.topk, "logits": pt.logits}, "chosen": {"topk": ch.topk, "logits": ch.logits}},
        "rerun_diff": pt.unstable_rows,
        "unstable": {"per_token": pt.unstable_rows, "chosen": ch.unstable_rows},
        "layouts": (pt.layout, ch.layout),
        "kernel_q": (pt.kernel_q, ch.kernel_q),
        "width": pt.block_table_width,
    }


def eager_variants(fx, next_n, lengths, seed, timing, args, patched) -> dict:
    """Both variants run eagerly (timed in turn with ``--time-eager``), and the per-token path once
    more against itself."""
    pt = eager_variant(fx, next_n, lengths, True, seed, keep_logits=True)
    ch = eager_variant(fx, next_n, lengths, False, seed, keep_logits=True) if patched else pt
    us = time_interleaved(fx.torch, [pt["run"], ch["run"]], args.iters, args.reps) if timing else [None, None]
    again = eager_variant(fx, next_n, lengths, True, seed)
    return {
        "us": us,
        "refs": {"per_token": pt, "chosen": ch},
        "rerun_diff": same_sets_rows(fx.torch, pt["topk"], again["topk"]),
        "unstable": None,
        "layouts": (pt["layout"], ch["layout"]),
        "kernel_q": (pt["kernel_q"], ch["kernel_q"]),
        "width": max(lengths),
    }


def run_case(fx, case, grids, graph, args, pristine, patched):
    """One row: the forced per-token variant, the chosen one (patched trees), compared."""
    torch = fx.torch
    next_n, bs, ctx, kind = case
    lengths = make_lengths(kind, bs, ctx, next_n)
    timing = args.device.startswith("cuda") and (graph or args.time_eager)
    ran = (graph_variants if graph else eager_variants)(fx, next_n, lengths, case_seed(*case), timing, args, patched)
    ref, got = ran["refs"]["per_token"], ran["refs"]["chosen"]
    cmp_args = (ref["logits"], fx.entry_pos, next_n, lengths)
    cmp = {"chosen": compare_topk(torch, ref["topk"], got["topk"], *cmp_args, got_logits=got["logits"])}
    if pristine is not None:
        cmp["pristine"] = compare_topk(torch, ref["topk"], pristine.to(ref["topk"].device), *cmp_args)
    logits_same = logits_bit_identical(torch, ref["logits"], got["logits"], next_n, lengths) if patched else None
    return case_row(case, grids, graph, lengths, ran, cmp, logits_same, bool(timing)), ref


def case_row(case, grids, graph, lengths, ran, cmp, logits_same, timing) -> dict:
    """The row of a case from its variants' run (``ran``), the comparisons (``cmp``: against the
    per-token variant, per side compared), whether the two variants' logits were bit-identical and
    whether they were timed in turn."""
    next_n, bs, ctx, kind = case
    total = merge_cmp(cmp.values())
    us, layouts, kernel_q = ran["us"], ran["layouts"], ran["kernel_q"]
    row = {
        "next_n": next_n,
        "batch_size": bs,
        "ctx": ctx,
        "lengths": kind,
        "cuda_graph": graph,
        "layout": layouts[1],
        "topk_identical": total["mismatch_rows"] == 0 and total["explained_rows"] == 0 and total["near_tie_rows"] == 0,
        "topk_equivalent": total["mismatch_rows"] == 0,
        "logits_bit_identical": logits_same,
        "per_token_us": _r(us[0]),
        "chosen_us": _r(us[1]),
        "speedup": _r(us[0] / us[1], 3) if us[0] and us[1] else None,
        "per_token_layout": layouts[0],
        "kernel_q_chosen": kernel_q[1],
        "kernel_q_per_token": kernel_q[0],
        "compared_with": ["per_token"] + sorted(cmp),
        **{key: {k: v[key] for k, v in cmp.items()} for key in ("tie_rows", "near_tie_rows", "mismatch_rows")},
        "explained_rows": {k: v["explained_rows"] for k, v in cmp.items()},
        "per_token_rerun_diff_rows": ran["rerun_diff"],
        "topk_rows": total["rows"] // len(cmp),
        "replay_unstable_rows": ran["unstable"],
        "kv_lengths": lengths if kind == "ragged" and bs <= 8 else None,
        "grids": grids,
        "block_table_width": ran["width"],
        "timing_interleaved": timing,
    }
    if total["first_mismatch"]:
        row["first_mismatch"] = total["first_mismatch"]
    explained = [dict(e, against=k) for k, v in cmp.items() for e in v["explained"]]
    if explained:
        row["explained"] = explained[:8]
    return row


def _r(x, digits=1):
    return None if x is None else round(x, digits)
