"""Tables and a picture from bench/engine_ab.py runs (the JSON its --out writes), one or several.

    python -m bench.engine.report docs/results/engine_h200_run*.json \\
        --json docs/results/engine_h200.json --md docs/results/engine_h200.md --png docs/results/engine_h200.png

The combined JSON keeps every row as its run wrote it, adds the run it came from (``run``: file
name, the series it ran, versions, command), and nothing else. The markdown says, per run, what
ran; then one table row per case: verify forward GPU time pristine -> patched, the ratio and the
A/A floor beside it, the step interval (the engine's time per output token with dummy weights)
and streamed TPOT with their ratios, the indexer's share of the verify forward in each tree, and
the fraction of requests whose output tokens are identical; for runs that timed the parts of the
decode step, a second table: the whole step's and draft-extend's GPU time, draft-extend's host time
and how many of its passes replayed a CUDA graph, pristine -> patched; for runs with accepted drafts
(sglang's simulated acceptance) or a second pristine process, a third: TPOT and output tokens/s
with the two-process A/A floor, each part of the step, the host gap between steps, and how many
verify positions (every next_n position of every request, greedy) gave the same argmax. Rows of a
``--patched-only`` run (no pristine engine ran) have a table of their own, the patched engine's figures
alone, draft-extend's host time first; they are in none of the tables above, which compare.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.engine.rows import row_labels


def load_runs(paths: list[Path]) -> list[dict]:
    runs = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        runs.append({"file": Path(path).name, **doc})
    return runs


def combined(runs: list[dict]) -> dict:
    rows, about = [], []
    for run in runs:
        meta = run["meta"]
        labels = row_labels(meta)
        series = meta.get("series") or []
        about.append(
            {
                "run": run["file"],
                "line": meta["line"],
                "parallel": meta.get("parallel", "tp1"),
                "started": meta.get("started"),
                "command": meta.get("command"),
                "versions": meta.get("versions"),
                **({"deep_gemm": run["deep_gemm"]} if run.get("deep_gemm") else {}),
                "series": [{"name": p["name"], "sha256": p["sha256"][:12]} for p in series],
                "notes": run.get("notes", []),
                "sgl_kernel_version_check_skipped": labels["sgl_kernel_version_check_skipped"],
                "seed_cases": seed_cases(run),
            }
        )
        # runs written before a label existed get it from their own meta (the env they recorded)
        rows += [{**labels, **row, "run": run["file"]} for row in run["rows"]]
    return {"runs": about, "rows": rows}


def _one_line(note: str) -> str:
    """A note as one line: an engine's failure keeps its message, not the thread dump under it."""
    first, _, rest = note.partition("\n")
    return first + (f" [{len(rest.splitlines())} more lines in the run's JSON]" if rest else "")


def _gate(run: dict) -> str:
    return " (sglang's sglang-kernel version gate skipped)" if run.get("sgl_kernel_version_check_skipped") else ""


def _f(value, digits=0, suffix=""):
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _share(row, label):
    share = (row.get("indexer_share") or {}).get(label)
    return "-" if not share else f"{100 * share['share']:.0f}%"


def _deep_gemm(run: dict) -> str:
    """The DeepGEMM that ran: the source build where the run recorded one (its `versions` still name
    the wheel installed behind it on the path), else the wheel's version."""
    built = run.get("deep_gemm")
    if not built:
        return f"sgl-deep-gemm {(run['versions'] or {}).get('sgl-deep-gemm')}"
    return (
        f"DeepGEMM built from {built['source']} {built['commit'][:7]} (line {built['line']}, "
        f"{len(built.get('patches') or [])} of its patches)"
    )


def markdown(doc: dict) -> str:
    out = []
    for run in doc["runs"]:
        patches = ", ".join(f"{p['name'][:4]} ({p['sha256']})" for p in run["series"]) or "not recorded"
        v = run["versions"] or {}
        out.append(
            f"- **{run['run']}** ({run['line']}, {run['parallel']}, {run['started']}): series {patches}; "
            f"torch {v.get('torch')}, {_deep_gemm(run)}, sglang-kernel {v.get('sglang-kernel')}"
            f"{_gate(run)}, "
            f"flashinfer {v.get('flashinfer-python')}, {v.get('gpu')}. Command: `{run['command']}`"
        )
        for note in run["notes"]:
            out.append(f"  - {_one_line(note)}")
    out.append("")
    compared = [r for r in doc["rows"] if not r.get("patched_only")]  # a --patched-only run's rows compare nothing
    if compared:
        out.append(
            "| run | line | next_n | requests | ctx | lengths | patched rows | verify us pristine -> patched | x | A/A | "
            "step ms pristine -> patched | x | A/A | TPOT ms pristine -> patched | x | indexer share pristine / patched | tokens identical |"
        )
        out.append("|" + "---|" * 17)
    for r in compared:
        aa = r.get("aa_noise") or {}
        layouts = "; ".join(r["patched"]["layouts"])
        out.append(
            f"| {_run_name(r['run'])} | {r['line']} | {r['next_n']} | {r['batch_size']} | {r['ctx'] // 1024}k | "
            f"{r['lengths']} | {layouts} | {_f(r['pristine']['verify_step_us'])} -> {_f(r['patched']['verify_step_us'])} | "
            f"{_f(r['speedup_verify'], 3)} | {_f(aa.get('verify'), 3)} | "
            f"{_f(r['pristine'].get('step_interval_ms'), 2)} -> {_f(r['patched'].get('step_interval_ms'), 2)} | "
            f"{_f(r.get('speedup_step_interval'), 3)} | {_f(aa.get('step_interval'), 3)} | "
            f"{_f(r['pristine']['tpot_ms'], 2)} -> {_f(r['patched']['tpot_ms'], 2)} | {_f(r['speedup_tpot'], 3)} | "
            f"{_share(r, 'pristine')} / {_share(r, 'patched')} | {r['tokens_identical']} |"
        )
    timed = [r for r in compared if r["pristine"].get("parts") and r["patched"].get("parts")]
    if timed:
        out += ["", "Decode-step parts (medians per step; graph: share of draft-extend passes that replayed one):", ""]
        out.append(
            "| run | next_n | requests | ctx | lengths | step GPU ms | x | A/A | draft-extend GPU ms | x | "
            "draft-extend host ms | x | draft-extend graph | verify GPU ms |"
        )
        out.append("|" + "---|" * 14)
        for r in timed:
            p, x = r["pristine"]["parts"], r["patched"]["parts"]
            ratios = r.get("speedup_parts") or {}
            out.append(
                f"| {_run_name(r['run'])} | {r['next_n']} | {r['batch_size']} | {r['ctx'] // 1024}k | {r['lengths']} | "
                f"{_pair(p, x, 'step', 'gpu_ms')} | {_f((ratios.get('step') or {}).get('gpu'), 3)} | "
                f"{_f((r.get('aa_noise') or {}).get('step_gpu'), 3)} | {_pair(p, x, 'draft_extend', 'gpu_ms')} | "
                f"{_f((ratios.get('draft_extend') or {}).get('gpu'), 3)} | {_pair(p, x, 'draft_extend', 'host_ms')} | "
                f"{_f((ratios.get('draft_extend') or {}).get('host'), 3)} | {_pair(p, x, 'draft_extend', 'graph')} | "
                f"{_pair(p, x, 'verify', 'gpu_ms')} |"
            )
    served = [r for r in compared if r.get("simulated_acceptance") or r.get("aa_noise_processes")]
    if served:
        out += ["", *served_table(served)]
    drafted = [r for r in compared if r.get("draft_positions") or r.get("mem_gb")]
    if drafted:
        out += ["", *draft_and_memory_table(drafted)]
    alone = [r for r in doc["rows"] if r.get("patched_only")]
    if alone:
        out += ["", *patched_only_table(alone)]
    for run, s in [(about, case) for about in doc["runs"] for case in about.get("seed_cases") or []]:
        out.append("")
        out.append(
            f"IndexShare case ({run['run']}, next_n {s['next_n']}): {s['requests']} requests arriving over "
            f"{s['arrivals_s'][1]} s, {s['prompt_tokens'][0]}-{s['prompt_tokens'][1]} prompt tokens, "
            f"{s['new_tokens'][0]}-{s['new_tokens'][1]} new tokens each; tokens identical {s['tokens_identical']}; "
            f"draft loops (seeded / all): pristine {_loops(s, 'pristine')}, patched {_loops(s, 'patched')}."
        )
        parts = s.get("step_parts") or {}
        if parts.get("pristine") and parts.get("patched"):
            out[-1] += (
                f" Draft-extend host ms (median / max): pristine {_host(parts['pristine'])}, patched "
                f"{_host(parts['patched'])}; its graph share: {_pair(parts['pristine'], parts['patched'], 'draft_extend', 'graph')}."
            )
        if s.get("draft_positions"):
            out[
                -1
            ] += (
                f" Draft positions identical to the patched tree's eager draft-extend: {_drafts(s['draft_positions'])}."
            )
    return "\n".join(out) + "\n"


def served_table(rows: list[dict]) -> list[str]:
    """What a user's server sees: TPOT with accepted drafts beside the floor of two pristine processes."""
    out = [
        "What a server sees (accepted drafts: sglang's SGLANG_SIMULATE_ACC_LEN in the timed runs; A/A: two "
        "pristine engine processes; GPU ms per step; positions: greedy runs, every next_n position):",
        "",
        "| run | line | KV | layers | next_n | accepted | requests | ctx | lengths | TPOT ms pristine -> patched | x | "
        "A/A | tokens/s pristine -> patched | x | step GPU ms | x | A/A | draft | verify | draft-extend | "
        "host gap ms | tokens identical | verify positions identical (near-ties) |",
        "|" + "---|" * 23,
    ]
    for r in rows:
        p, x = r["pristine"], r["patched"]
        aa = r.get("aa_noise_processes") or {}
        positions = r.get("verify_positions") or {}
        out.append(
            f"| {_run_name(r['run'])} | {r['line']} | {r.get('kv_cache_dtype')} | {r.get('layers')} | {r['next_n']} | "
            f"{_f(r.get('simulated_acceptance'), 1) if r.get('simulated_acceptance') else 'greedy'} | {r['batch_size']} | "
            f"{r['ctx'] // 1024}k | {r['lengths']} | {_f(p['tpot_ms'], 2)} -> {_f(x['tpot_ms'], 2)} | "
            f"{_f(r['speedup_tpot'], 3)} | {_f(aa.get('tpot'), 3)} | {_f(p.get('tokens_per_s'))} -> "
            f"{_f(x.get('tokens_per_s'))} | {_f(r.get('speedup_tokens_per_s'), 3)} | "
            f"{_pair(p['parts'], x['parts'], 'step', 'gpu_ms')} | {_f((r['speedup_parts'].get('step') or {}).get('gpu'), 3)} | "
            f"{_f(aa.get('step_gpu'), 3)} | {_pair(p['parts'], x['parts'], 'draft', 'gpu_ms')} | "
            f"{_pair(p['parts'], x['parts'], 'verify', 'gpu_ms')} | {_pair(p['parts'], x['parts'], 'draft_extend', 'gpu_ms')} | "
            f"{_pair(p['parts'], x['parts'], 'step', 'host_gap_ms')} | {r['tokens_identical']} | "
            f"{_f(positions.get('identical'), 4)} of {positions.get('positions', '-')} ({positions.get('near_ties', '-')}) |"
        )
    return out


def draft_and_memory_table(rows: list[dict]) -> list[str]:
    """Every draft position compared, each engine's memory, and the step gaps' tail beside tokens/s over
    one wall time (rows of runs that recorded them)."""
    out = [
        "Draft positions (greedy runs: every draft position of every request, patched against pristine, and "
        "the two pristine processes), memory as sglang reports it once the engine has started (GiB; graphs: "
        "sglang's figure, then the probe's capture rounds), the step gaps' percentiles and output tokens/s over "
        "the same wall time in every run (rows before 6 Dec 2026 took it from a run's earliest first token, "
        "part of the batch still in its prefill: not shown):",
        "",
        "| run | line | next_n | requests | ctx | lengths | draft positions identical (near-ties) | two pristine | "
        "KV pool | graphs pristine | graphs patched | step gap ms p50 / p90 / p99 pristine -> patched | "
        "x p90 (A/A) | tokens/s, same wall time | x (A/A) |",
        "|" + "---|" * 15,
    ]
    for r in rows:
        memory = r.get("mem_gb") or {}
        aa = r.get("aa_noise_processes") or r.get("aa_noise") or {}
        tail = r.get("speedup_step_interval_percentiles") or {}
        out.append(
            f"| {_run_name(r['run'])} | {r['line']} | {r['next_n']} | {r['batch_size']} | {r['ctx'] // 1024}k | "
            f"{r['lengths']} | {_drafts(r.get('draft_positions'))} | {_drafts(r.get('draft_positions_two_pristine'))} | "
            f"{_f((memory.get('patched') or {}).get('kv_pool'), 1)} | {_graphs(memory.get('pristine'))} | "
            f"{_graphs(memory.get('patched'))} | {_tail(r['pristine'])} -> {_tail(r['patched'])} | "
            f"{_f(tail.get('p90'), 3)} ({_f((aa.get('step_interval_percentiles') or {}).get('p90'), 3)}) | "
            f"{_window_rate(r, aa)} |"
        )
    return out


def patched_only_table(rows: list[dict]) -> list[str]:
    """Rows of --patched-only runs: the patched engine's own figures, nothing compared (no pristine ran)."""
    out = [
        "The patched engine alone (`--patched-only`: no pristine engine ran, so nothing here is a comparison; "
        "medians per step, GiB as sglang reports them):",
        "",
        "| run | line | KV | next_n | accepted | requests | ctx | lengths | draft-extend host ms median / max | "
        "draft-extend GPU ms | draft-extend graph | TPOT ms | step interval ms | step GPU ms | tokens/s | "
        "KV pool | draft positions recorded |",
        "|" + "---|" * 17,
    ]
    for r in rows:
        x = r["patched"]
        parts = x.get("parts") or {}
        extend = parts.get("draft_extend") or {}
        recorded = r.get("positions_recorded") or {}
        accepted = _f(r.get("simulated_acceptance"), 1) if r.get("simulated_acceptance") else "greedy"
        out.append(
            f"| {_run_name(r['run'])} | {r['line']} | {r.get('kv_cache_dtype')} | {r['next_n']} | {accepted} | "
            f"{r['batch_size']} | {r['ctx'] // 1024}k | {r['lengths']} | {_host(parts)} | "
            f"{_f(extend.get('gpu_ms'), 2)} | {_f(extend.get('graph'), 2)} | {_f(x.get('tpot_ms'), 2)} | "
            f"{_f(x.get('step_interval_ms'), 2)} | {_f((parts.get('step') or {}).get('gpu_ms'), 2)} | "
            f"{_f(x.get('tokens_per_s'))} | {_f(((r.get('mem_gb') or {}).get('patched') or {}).get('kv_pool'), 1)} | "
            f"{recorded.get('draft_positions', '-')} |"
        )
    return out


def _window_rate(row: dict, aa: dict) -> str:
    """The two tokens/s cells: rows before 6 Dec 2026 (no `window_from`) began the window at a run's earliest
    first token, where part of the batch was still in its prefill, and counted whole chunks (A/A 0.59-1.30 at
    32 x 64k; engine-benchmark.md): their values are not shown."""
    if "window_from" not in row:
        return "- (old window) | - (-)"
    rates = f"{_f(row['pristine'].get('tokens_per_s_window'))} -> {_f(row['patched'].get('tokens_per_s_window'))}"
    return f"{rates} | {_f(row.get('speedup_tokens_per_s_window'), 3)} ({_f(aa.get('tokens_per_s_window'), 3)})"


def _drafts(compared: dict | None) -> str:
    if not compared:
        return "-"
    return f"{_f(compared.get('identical'), 4)} of {compared['positions']} ({compared['near_ties']})"


def _graphs(memory: dict | None) -> str:
    if not memory:
        return "-"
    sglang = memory.get("graphs")
    sglang = sum(sglang.values()) if isinstance(sglang, dict) else sglang
    return f"{_f(sglang, 2)} / {_f((memory.get('probe') or {}).get('graphs_total'), 2)}"


def _tail(engine: dict) -> str:
    tail = engine.get("step_interval_ms_percentiles") or {}
    return " / ".join(_f(tail.get(p), 2) for p in ("p50", "p90", "p99"))


def seed_cases(run: dict) -> list[dict]:
    """A run's IndexShare cases (older runs hold at most one, as ``seed_case``)."""
    if "seed_cases" in run:
        return run["seed_cases"]
    return [run["seed_case"]] if run.get("seed_case") else []


def _run_name(file: str) -> str:
    return file.replace("engine_h200_", "").replace(".json", "")


def _pair(pristine: dict, patched: dict, part: str, what: str) -> str:
    return f"{_f((pristine.get(part) or {}).get(what), 2)} -> {_f((patched.get(part) or {}).get(what), 2)}"


def _host(parts: dict) -> str:
    extend = parts.get("draft_extend") or {}
    return f"{_f(extend.get('host_ms'), 2)} / {_f(extend.get('host_ms_max'), 2)}"


def _loops(seed_case, label):
    loops = (seed_case.get("draft_loops") or {}).get(label) or {}
    return f"{loops.get('seeded', '-')} / {loops.get('loops', '-')}"


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = sorted({(r["line"], r["next_n"], r.get("kv_cache_dtype") or "bfloat16") for r in doc["rows"]})
    lines = sorted({(line, kv) for line, _, kv in series})
    next_ns = sorted({n for _, n, _ in series})
    # the newest run of each case: later runs (file order) measured the series as it is now; a --patched-only
    # run's row has no ratio to plot, so it is no case's newest
    newest = {
        (r["line"], r["next_n"], r["ctx"], r["batch_size"], r["lengths"], r.get("kv_cache_dtype")): r
        for r in doc["rows"]
        if not r.get("patched_only")
    }
    rows = [r for r in newest.values() if r.get("speedup_verify")]
    cases = sorted({(r["ctx"], r["batch_size"], r["lengths"]) for r in rows})
    labels = [f"{bs}x{ctx // 1024}k{'r' if lengths == 'ragged' else ''}" for ctx, bs, lengths in cases]
    panels = [
        ("speedup_verify", "verify", "verify forward (GPU time)"),
        ("speedup_step_interval", "step_interval", "step interval"),
    ]
    if any(r.get("simulated_acceptance") for r in rows):
        panels.append(("speedup_tpot", "tpot", "TPOT, accepted drafts"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2))
    for ax, (key, aa_key, title) in zip(axes, panels, strict=True):
        for line, n, kv in series:
            points = [
                (cases.index((r["ctx"], r["batch_size"], r["lengths"])), r)
                for r in rows
                if (r["line"], r["next_n"], r.get("kv_cache_dtype") or "bfloat16") == (line, n, kv)
                and r.get(key)
                and (key != "speedup_tpot" or r.get("simulated_acceptance"))
            ]
            if not points:
                continue
            points.sort(key=lambda point: point[0])
            xs = [x for x, _ in points]
            style = dict(color=f"C{next_ns.index(n)}", ls=("-", "--", ":", "-.")[lines.index((line, kv)) % 4])
            ax.plot(xs, [r[key] for _, r in points], marker="o", **style, label=f"{line} {kv} KV next_n {n}")
            floors = [(r.get("aa_noise_processes") or r.get("aa_noise") or {}).get(aa_key) for _, r in points]
            ax.scatter(xs, [f or float("nan") for f in floors], marker="x", color="grey")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(labels)), labels, rotation=60)
        ax.set_title(f"pristine / patched: {title}")
        ax.set_xlabel("requests x context (r: ragged), newest run per case; x: A/A floor")
        if ax.get_legend_handles_labels()[0]:  # none where every row is a --patched-only run's
            ax.legend(fontsize="small", ncol=2)
    fig.suptitle("sglang Engine, MTP (EAGLE topk 1), CUDA graphs, overlap scheduler; H200; DSA layers, dummy weights")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--png", type=Path)
    args = ap.parse_args(argv)
    doc = combined(load_runs(args.runs))
    text = markdown(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if args.md:
        args.md.write_text(text)
    if args.png:
        plot(doc, args.png)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
