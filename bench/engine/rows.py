"""One case's JSON row: each engine's measures side by side, the ratios pristine / patched, the A/A
floor, and the accuracy comparisons (pure functions, tested on CPU).

Per case the row gives the verify forward's GPU time (median over the case's TARGET_VERIFY forwards,
first ``skip`` steps of each run left out; CUDA events around ``ModelRunner.forward`` in the
scheduler, bench/engine_probe), TPOT (per request, from the streamed chunks' times, then the
median), the step interval (the scheduler's wall time from one verify forward to the next: with one
token per step, the engine's own time per output token), each part of the decode step (the whole
step, the draft loop, verify, draft-extend: GPU time between CUDA events and host time of the Python
call, medians; for draft-extend the fraction that replayed its CUDA graph), the ratios
pristine/patched, the A/A floor (pristine's odd runs against its even runs, the same positions the
patched runs take; with a second pristine process, the two processes against each other), the
fraction of requests whose output ids are identical to pristine's, and for a divergence its first
position. Acceptance length is recorded and is meaningless with dummy weights unless sglang's
simulated acceptance sets it.
"""

from __future__ import annotations

import statistics

from bench.engine.compare import compare_draft_positions, compare_outputs, compare_positions, draft_steps
from bench.engine.grid import Case
from bench.engine.measures import (
    STEP_PARTS,
    host_per_run,
    indexer_share,
    layouts_seen,
    mean_tpot_ms,
    part_value,
    step_interval_ms,
    step_interval_ms_per_run,
    step_interval_percentiles,
    step_parts,
    streaming_span,
    tokens_per_s,
    tokens_per_s_window,
    tokens_per_s_window_runs,
    tpot_ms,
    tpot_ms_per_run,
    verify_step_us,
)
from bench.engine.precision import ratio_interval

VERSION_GATE_SKIPPED = "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"


def row_labels(meta: dict) -> dict:
    """What every row of a run carries about how it ran: its line, its parallel layout, and whether
    sglang's sglang-kernel version gate was passed over (0.5.23 on the box's older sglang-kernel)."""
    return {
        "line": meta["line"],
        "parallel": meta.get("parallel", "tp1"),
        "sgl_kernel_version_check_skipped": (meta.get("env") or {}).get(VERSION_GATE_SKIPPED) == "1",
        "kv_cache_dtype": (meta.get("engine_args") or {}).get("kv_cache_dtype"),
        "layers": (meta.get("model") or {}).get("num_hidden_layers"),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def engine_summary(runs: list[dict], batch_size: int, skip: int, window_s: float | None = None) -> dict:
    return {
        "verify_step_us": verify_step_us(runs, batch_size, skip),
        "tpot_ms": tpot_ms(runs),
        "tpot_ms_mean_of_runs": mean_tpot_ms(runs),
        "tpot_ms_runs": tpot_ms_per_run(runs),
        "cpus_runs": [run.get("cpus") for run in runs],
        "gpu_clocks_runs": [run.get("gpu_clocks") for run in runs],
        "host_runs": host_per_run(runs, batch_size, skip),
        "sm_mhz": sm_mhz(runs),
        "tokens_per_s": tokens_per_s(runs),
        "step_interval_ms": step_interval_ms(runs, batch_size, skip),
        "step_interval_ms_runs": step_interval_ms_per_run(runs, batch_size, skip),
        "layouts": layouts_seen(runs, batch_size),
        "parts": step_parts(runs, batch_size, skip),
        "step_interval_ms_percentiles": step_interval_percentiles(runs, batch_size, skip),
        "tokens_per_s_window": tokens_per_s_window(runs, window_s),
        "tokens_per_s_window_runs": tokens_per_s_window_runs(runs, window_s),
    }


def sm_mhz(runs: list[dict]) -> float | None:
    """The SM clock over an engine's timed runs: the median of the runs' own medians (bench/gpu_clocks.py)."""
    medians = [run["gpu_clocks"]["sm_mhz"]["median"] for run in runs if (run.get("gpu_clocks") or {}).get("sm_mhz")]
    return statistics.median(medians) if medians else None


def percentile_ratios(first: dict | None, second: dict | None) -> dict | None:
    if not first or not second:
        return None
    return {p: ratio(first[p], second[p]) for p in first}


def floor(first: list[dict], second: list[dict], bs: int, skip: int, window_s: float | None = None) -> dict:
    """The ratios two sets of pristine runs give (what a pure re-run moves)."""
    return {
        "verify": ratio(verify_step_us(first, bs, skip), verify_step_us(second, bs, skip)),
        "tpot": ratio(tpot_ms(first), tpot_ms(second)),
        "tpot_mean_of_runs": ratio(mean_tpot_ms(first), mean_tpot_ms(second)),
        "tpot_mean_of_runs_interval": ratio_interval(tpot_ms_per_run(first), tpot_ms_per_run(second)),
        "step_interval_mean_of_runs_interval": ratio_interval(
            step_interval_ms_per_run(first, bs, skip), step_interval_ms_per_run(second, bs, skip)
        ),
        "step_interval": ratio(step_interval_ms(first, bs, skip), step_interval_ms(second, bs, skip)),
        "step_gpu": ratio(
            part_value(step_parts(first, bs, skip), "step", "gpu_ms"),
            part_value(step_parts(second, bs, skip), "step", "gpu_ms"),
        ),
        "tokens_per_s": ratio(tokens_per_s(second), tokens_per_s(first)),
        "tokens_per_s_window": ratio(tokens_per_s_window(second, window_s), tokens_per_s_window(first, window_s)),
        # a rate: the second process's over the first's, so that above 1 is the first slower, as for the times
        "tokens_per_s_window_mean_of_runs_interval": ratio_interval(
            tokens_per_s_window_runs(second, window_s), tokens_per_s_window_runs(first, window_s)
        ),
        "step_interval_percentiles": percentile_ratios(
            step_interval_percentiles(first, bs, skip), step_interval_percentiles(second, bs, skip)
        ),
    }


# where a row's fixed window starts in each run: rows before 6 Dec 2026 (no window_from key) took it from the
# run's earliest first token, and counted whole chunks (report._window_rate)
WINDOW_FROM = "every request decoding, chunks spread over their gaps"


def fixed_window_s(runs: dict) -> float | None:
    """The wall time every timed run of every engine had all its requests decoding throughout: the shortest
    streaming span (measures.streaming_span; until 6 Dec 2026 the span from a run's earliest first token to
    its last token, which at 32 x 64k held the other requests' prefill), of the spans at least half the median
    one. The spans come from the chunks' arrival in the client: in an H100 call whose verify forwards all held
    the whole batch, the shortest span of its 388 runs was 9 ms, and it made every run's window 9 ms
    (results/engine_h100_floor64k_aa_random_layout.json; two calls of the same setup had 0.187 s). A run
    whose span is shorter than the window is left out of its rates and counted in ``window_short_runs``. The
    half is a choice, fitted on no grid: the committed rows keep no spans to fit or test it on, and the next
    call's ``window_short_runs`` is its first check."""
    spans = [span[1] - span[0] for rs in runs.values() for run in rs if (span := streaming_span(run))]
    if not spans:
        return None
    half_median = statistics.median(spans) / 2
    return min(s for s in spans if s >= half_median)


def window_short_runs(runs: dict, window_s: float | None) -> dict[str, int] | None:
    """Per engine, the timed runs whose streaming span is shorter than the window (or have none), left out of
    its rates; None where there is no window."""
    if not window_s:
        return None
    return {label: tokens_per_s_window_runs(rs, window_s).count(None) for label, rs in runs.items()}


def _identity(runs: dict, greedy: dict | None, acceptance: float | None) -> tuple[list, list, list]:
    """Patched's outputs against pristine's first run (each run's fraction of identical requests,
    the divergences), and pristine's repeats against it. Simulated acceptance overwrites the emitted
    tokens: identity comes from the greedy runs then."""
    outputs_of = {label: [r["outputs"] for r in rs] for label, rs in runs.items()}
    if acceptance and greedy:
        outputs_of = {label: [run["outputs"]] for label, run in greedy.items()}
    identical, divergences = [], []
    for candidate in outputs_of["patched"]:
        fraction, div = compare_outputs(outputs_of["pristine"][0], candidate)
        identical.append(fraction)
        divergences += div
    repeats = outputs_of["pristine"][1:] + outputs_of.get("pristine_b", [])
    return identical, divergences, [compare_outputs(outputs_of["pristine"][0], o)[0] for o in repeats]


def _greedy_pairs(greedy: dict | None, compare) -> tuple[dict | None, dict | None]:
    """``compare`` on the greedy runs: patched against pristine, and the two pristine processes."""
    if not (greedy and "pristine" in greedy and "patched" in greedy):
        return None, None
    processes = compare(greedy["pristine"], greedy["pristine_b"]) if "pristine_b" in greedy else None
    return compare(greedy["pristine"], greedy["patched"]), processes


def engine_memory(info: dict) -> dict:
    """An engine's memory as sglang reports it once started (GB as sglang counts them, GiB), beside the
    probe's own figures: what torch held more after the KV pools and after each capture round."""
    usage = info.get("memory_usage") or {}
    probe = info.get("probe_memory") or {}
    graphs = [(g["runner"], g["gib"]) for g in probe.get("graphs", [])]
    return {
        "weights": usage.get("weight"),
        "kv_pool": usage.get("kvcache"),
        "graphs": usage.get("graph"),
        "token_capacity": usage.get("token_capacity"),
        "probe": {
            "kv_pool": probe.get("kv_pool_gib"),
            "draft_kv_pool": probe.get("draft_kv_pool_gib"),
            "graphs": graphs,
            "graphs_total": round(sum(gib for _, gib in graphs), 3) if graphs else None,
        },
    }


def case_row(
    case: Case,
    next_n: int,
    runs: dict,
    profiles: dict,
    skip: int,
    labels: dict | None = None,
    greedy: dict | None = None,
    acceptance: float | None = None,
) -> dict:
    """One JSON row from the runs of the engines (``runs[label]``: that engine's timed runs, in
    order; ``pristine_b``, where it ran, is a second pristine process). ``greedy[label]``: one
    greedy run per engine with every verify position recorded (the accuracy runs, untimed);
    ``acceptance``: the simulated acceptance length the timed runs ran with (None: greedy)."""
    p_runs, x_runs = runs["pristine"], runs["patched"]
    bs, window = case.batch_size, fixed_window_s(runs)
    pristine, patched = engine_summary(p_runs, bs, skip, window), engine_summary(x_runs, bs, skip, window)
    aa = floor(p_runs[::2], p_runs[1::2], bs, skip, window) if len(p_runs) >= 2 else None
    aa_processes = floor(p_runs, runs["pristine_b"], bs, skip, window) if runs.get("pristine_b") else None
    identical, divergences, p_repeat = _identity(runs, greedy, acceptance)
    positions, processes_positions = _greedy_pairs(greedy, lambda a, b: compare_positions(a, b, bs))
    drafts, processes_drafts = _greedy_pairs(greedy, compare_draft_positions)
    aa_floor = aa_processes or aa or {}
    return {
        **(labels or {}),
        **_case_fields(case, next_n, acceptance),
        "cuda_graph": _cuda_graph(p_runs + x_runs, bs),
        "pristine": pristine,
        "patched": patched,
        "speedup_verify": ratio(pristine["verify_step_us"], patched["verify_step_us"]),
        "speedup_tpot": ratio(pristine["tpot_ms"], patched["tpot_ms"]),
        "speedup_tpot_mean_of_runs": ratio(pristine["tpot_ms_mean_of_runs"], patched["tpot_ms_mean_of_runs"]),
        # its 95% interval and the runs that would pin it to 3% (the floor's is aa_noise_*'s tpot_mean_of_runs_interval)
        "speedup_tpot_mean_of_runs_interval": ratio_interval(pristine["tpot_ms_runs"], patched["tpot_ms_runs"]),
        "speedup_step_interval_mean_of_runs_interval": ratio_interval(
            pristine["step_interval_ms_runs"], patched["step_interval_ms_runs"]
        ),
        "speedup_tokens_per_s": ratio(patched["tokens_per_s"], pristine["tokens_per_s"]),
        "speedup_step_interval": ratio(pristine["step_interval_ms"], patched["step_interval_ms"]),
        # pristine over patched, per part of the decode step (GPU events, host wall time)
        "speedup_parts": {
            part: {
                what: ratio(
                    part_value(pristine["parts"], part, f"{what}_ms"), part_value(patched["parts"], part, f"{what}_ms")
                )
                for what in ("gpu", "host")
            }
            for part in STEP_PARTS
            if part in pristine["parts"] and part in patched["parts"]
        },
        "aa_noise": aa,
        # the floor that covers what the A/B has: two engine processes (where a second pristine ran)
        "aa_noise_processes": aa_processes,
        "aa_noise_tpot": aa_floor.get("tpot"),
        "aa_noise_tpot_mean_of_runs": aa_floor.get("tpot_mean_of_runs"),
        "aa_noise_kind": "two processes" if aa_processes else "one process, its runs in two halves",
        "sm_mhz_pristine_b": sm_mhz(runs["pristine_b"]) if runs.get("pristine_b") else None,
        # the second pristine process's host, run by run, as each engine's own host_runs
        "host_runs_pristine_b": host_per_run(runs["pristine_b"], bs, skip) if runs.get("pristine_b") else None,
        "indexer_share": {label: indexer_share(profiles.get(label)) for label in ("pristine", "patched")},
        "tokens_identical": min(identical) if identical else None,
        "pristine_repeat_identical": min(p_repeat) if p_repeat else None,
        "divergences": divergences[:16],
        "verify_positions": positions,
        "verify_positions_identical": (positions or {}).get("identical"),
        "verify_positions_two_pristine": processes_positions,
        "draft_positions": drafts,
        "draft_positions_identical": (drafts or {}).get("identical"),
        "draft_positions_two_pristine": processes_drafts,
        # the same wall time in every run from when all its requests decode (the shortest such span), and the step gaps' tail
        "window_s": window,
        "window_short_runs": window_short_runs(runs, window),
        "speedup_tokens_per_s_window": ratio(patched["tokens_per_s_window"], pristine["tokens_per_s_window"]),
        "speedup_tokens_per_s_window_mean_of_runs_interval": ratio_interval(
            patched["tokens_per_s_window_runs"], pristine["tokens_per_s_window_runs"]
        ),
        "window_from": WINDOW_FROM,
        "speedup_step_interval_percentiles": percentile_ratios(
            pristine["step_interval_ms_percentiles"], patched["step_interval_ms_percentiles"]
        ),
        "verify_samples": _verify_samples(runs, bs),
        "accept_length": _accept_length(p_runs + x_runs),
    }


def _case_fields(case: Case, next_n: int, acceptance: float | None) -> dict:
    """The keys that name a row's case, the same in a compared row and a --patched-only one."""
    return {
        "next_n": next_n,
        "batch_size": case.batch_size,
        "ctx": case.ctx,
        "lengths": case.lengths,
        "new_tokens": case.new_tokens,
        "simulated_acceptance": acceptance,
    }


def _cuda_graph(runs: list[dict], bs: int) -> bool:
    """Whether every verify forward at the case's batch size replayed a CUDA graph."""
    return all(r.get("graph") for run in runs for r in run.get("verify", []) if r["batch_size"] == bs)


def _verify_samples(runs: dict, bs: int) -> dict:
    return {
        label: sum(1 for run in rs for r in run.get("verify", []) if r["batch_size"] == bs and not r["profiled"])
        for label, rs in runs.items()
    }


def _accept_length(runs: list[dict]) -> float | None:
    accept = [
        o["meta"].get("spec_accept_length")
        for r in runs
        for o in r["outputs"]
        if o["meta"].get("spec_accept_length") is not None
    ]
    return statistics.median(accept) if accept else None


def positions_recorded(greedy_run: dict | None, bs: int) -> dict | None:
    """What one engine's greedy run recorded, counted, not compared (a run with no other engine): its
    verify positions at the case's batch size, and its draft positions (steps, positions, record errors)."""
    if not greedy_run:
        return None
    forwards = [r for r in greedy_run.get("positions", []) if r["batch_size"] == bs]
    steps = draft_steps(greedy_run)
    errors = [r["error"] for r in greedy_run.get("draft_positions", []) if r["kind"] == "error"]
    return {
        "verify_forwards": len(forwards),
        "verify_positions": sum(len(r["argmax"]) for r in forwards),
        "draft_steps": len(steps),
        "draft_positions": sum(len(argmax) for argmax, _ in steps.values()),
        "draft_record_errors": errors[:4],
    }


# what a --patched-only run's meta and notes say of its rows
PATCHED_ONLY_NOTE = (
    "patched-only run (--patched-only): no pristine engine ran, so nothing in a row is a comparison "
    "(no ratio, no A/A floor, no identity check); each row is the patched engine's own measures"
)


def patched_only_row(
    case: Case,
    next_n: int,
    runs: dict,
    profiles: dict,
    skip: int,
    labels: dict | None = None,
    greedy: dict | None = None,
    acceptance: float | None = None,
) -> dict:
    """The row of a run with the patched engine alone (``--patched-only``; ``runs`` and ``greedy`` hold
    ``patched`` only): its summary as case_row gives it (TPOT, step interval, the step's parts with
    draft-extend's host and GPU time), what its greedy run recorded, counted, and no ratio against
    pristine, no floor and no identity check, since no pristine engine ran."""
    x_runs, bs = runs["patched"], case.batch_size
    window = fixed_window_s(runs)
    return {
        **(labels or {}),
        "patched_only": True,
        **_case_fields(case, next_n, acceptance),
        "cuda_graph": _cuda_graph(x_runs, bs),
        "patched": engine_summary(x_runs, bs, skip, window),
        "indexer_share": {"patched": indexer_share(profiles.get("patched"))},
        "positions_recorded": positions_recorded((greedy or {}).get("patched"), bs),
        "window_s": window,
        "window_short_runs": window_short_runs(runs, window),
        "window_from": WINDOW_FROM,
        "verify_samples": _verify_samples(runs, bs),
        "accept_length": _accept_length(x_runs),
    }
