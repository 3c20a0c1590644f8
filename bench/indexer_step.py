#!/usr/bin/env python3
"""The DSA indexer step of a TARGET_VERIFY forward, on a GPU, through sglang's own code.

One process imports one sglang tree (patched or pristine; ``--tree``) and, for every case of
a grid (next_n x batch size x context x uniform/ragged lengths), runs the paged indexer step
of a TARGET_VERIFY forward the way the model does, with nothing re-implemented:

- a real ``DeepseekSparseAttnBackend``, made by sglang's attention registry from the mock
  model runner of sglang's own DSA test kit (real ``ReqToTokenPool`` and ``DSATokenToKVPool``);
- the index-K cache written through ``Indexer._store_index_k_cache`` (sglang's fused fp8
  store kernel, or its ``act_quant`` + ``set_index_k_scale_buffer`` fallback);
- queries quantised with sglang's ``act_quant`` (DSA triton kernel), head weights scaled as
  the indexer scales them;
- eager: ``init_forward_metadata`` then ``get_indexer_metadata`` and
  ``Indexer._get_topk_paged`` (DeepGEMM ``fp8_paged_mqa_logits`` + the metadata's
  ``topk_transform``, sgl-kernel's fused top-k transform);
- CUDA graph: ``init_cuda_graph_state``, ``init_forward_metadata_out_graph(in_capture=True)``
  at capture with one set of lengths, the step captured in a ``torch.cuda.CUDAGraph``, then
  ``init_forward_metadata_out_graph`` with NEW lengths (the replay path) and ``replay()``.

Each case runs twice on a patched tree: with the layout the backend chooses, and with
``SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1`` (per-token, upstream's SM90 path), in both eager
and CUDA-graph mode.  A pristine tree runs per-token only and can dump its top-k
(``--dump-topk DIR``) for a patched run to compare against (``--compare-topk DIR``).

The fixture lays each request's whole pages over the KV pool at random (``--pages random``, the
default) or in one run per request (``--pages contiguous``, as a fresh engine's allocator does). On a
tree with the v0.5.23 line's patch 2, the JSON records what the installed DeepGEMM answered to its
probe of ``[B, next_n]`` rows, per next_n (``sm90_next_n_rows_probe``).

Top-k rows are compared as sets.  Where two sets differ, every differing entry's logit (from
the per-token kernel's own logits of that row) must equal the row's k-th largest logit: that
is a tie at the boundary, counted and reported, never hidden; anything else is a mismatch.

Timing (CUDA-graph mode): the captured indexer step (logits + top-k transform) replayed
``--reps`` x ``--iters`` times, median per step, per-token vs chosen layout in the same
process.  Every function and kernel counted in ``exercised`` was observed to run (call counts
from pass-through wrappers that only count), not just named.

This module is the command line and the run over a grid; its parts are in bench/indexer/ (the
grids, the sglang tree's adapter, the fixture, the top-k comparison, one case's row).

    python bench/indexer_step.py --tree PATCHED/ --grid full --json out.json --compare-topk DIR
    python bench/indexer_step.py --tree PRISTINE/ --label pristine --grid full --dump-topk DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # as a script (bench/ first on the path): `bench` is the repository's package

from bench.indexer import trees  # noqa: E402
from bench.indexer.case import run_case  # noqa: E402
from bench.indexer.fixture import (  # noqa: E402
    FIXTURE_SEED,
    INDEX_HEAD_DIM,
    INDEX_HEADS,
    INDEX_TOPK,
    PAGE,
    PAGES,
    SCALE_FMT,
    WATCH,
    Calls,
    Fixture,
    select_tree,
)
from bench.indexer.grids import (  # noqa: E402
    GRIDS,
    MODES,
    estimate_s,
    fixture_size,
    fmt_case,
    grid_cases,
    known_grids,
    make_lengths,
)
from bench.indexer.topk_compare import NO_SLOT_TO_SWAP, graph_vs_eager, sensitivity_check  # noqa: E402

# A pristine run's top-k dump (--dump-topk) holds the fixture it was taken on; a patched run compares
# with it only on a fixture of the same size (the KV slots and the keys follow the size).
FIXTURE_FILE = "fixture.json"


def fixture_doc(max_bs, max_ctx, pages="random"):
    return dict(max_bs=max_bs, max_ctx=max_ctx, seed=FIXTURE_SEED, page=PAGE, pages=pages)


def check_same_fixture(compare: Path, max_bs: int, max_ctx: int, pages: str) -> None:
    """Top-k saved in ``compare`` are KV slots of its run's fixture: refuse a fixture of another size or
    page layout."""
    saved = compare / FIXTURE_FILE
    if not saved.is_file():
        refuse(f"{compare}: no {FIXTURE_FILE}, so its top-k cannot be matched to this run's fixture")
    theirs = json.loads(saved.read_text())
    ours = fixture_doc(max_bs, max_ctx, pages)
    if theirs != ours:
        refuse(
            f"{compare} was dumped with a fixture of {theirs.get('max_bs')} x {theirs.get('max_ctx')} "
            f"(seed {theirs.get('seed')}, pages {theirs.get('pages', 'random')}), this run's is "
            f"{max_bs} x {max_ctx} (seed {FIXTURE_SEED}, pages {pages}): their KV slots differ; "
            "give both runs the same --fixture-grid and --pages"
        )


def refuse(msg: str):
    print(f"[indexer-step] {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def run(args):
    cases = grid_cases(known_grids(args.grid))
    sized_for = grid_cases(known_grids(args.fixture_grid)) if args.fixture_grid else {}
    max_bs, max_ctx = fixture_size([*cases, *sized_for])
    modes = MODES[args.modes]
    patched = args.label != "pristine"
    estimate = estimate_s(cases, modes, args.iters, args.reps, patched)
    log(f"{len(cases)} cases x {len(modes)} mode(s) ({args.grid}); about {estimate:.0f} s of timed replays on an H200")
    log(f"fixture: {max_bs} requests x {max_ctx} tokens, pages {args.pages}")
    if args.plan:
        return 0
    compare = Path(args.compare_topk) if args.compare_topk else None
    if compare:
        check_same_fixture(compare, max_bs, max_ctx, args.pages)
    select_tree(Path(args.tree))
    tree = trees.for_tree(Path(args.tree))
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    calls = Calls(tree)
    calls.install(WATCH + tree.extra_watch)
    next_ns = tuple(sorted({c[0] for c in cases}))
    t0 = time.time()
    fx = Fixture(max_bs, max_ctx, next_ns, args.device, calls, seed=FIXTURE_SEED, tree=tree, pages=args.pages)
    log(f"fixture ready in {time.time() - t0:.1f} s (pool for {max_bs} x {max_ctx} tokens)")
    probe = tree.next_n_rows_probe(fx.backends)
    if probe is not None:
        log(f"DeepGEMM's answers to the tree's [B, next_n] rows probe, per next_n: {probe['answers']}")
    run_facts = dict(fixture=(max_bs, max_ctx), probe=probe)
    dump = Path(args.dump_topk) if args.dump_topk else None
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / FIXTURE_FILE).write_text(json.dumps(fixture_doc(max_bs, max_ctx, args.pages)) + "\n")
    rows, all_ok, self_check = [], True, None
    for case, grids in cases.items():
        key = "n{}_b{}_c{}_{}".format(*case)
        dumped = torch.load(compare / f"{key}.pt") if compare and (compare / f"{key}.pt").is_file() else {}
        saved, refs = {}, {}
        for graph in modes:
            mode = "graph" if graph else "eager"
            row, ref = run_case(fx, case, grids, graph, args, dumped.get(mode), patched)
            refs[mode] = ref
            if self_check is None or self_check.get("reason") == NO_SLOT_TO_SWAP:
                # a case whose rows keep every key has nothing to swap in: try the next one
                self_check = sensitivity_check(
                    torch, ref, fx.entry_pos, case[0], make_lengths(case[3], *case[1:3], case[0])
                )
                if self_check.get("reason") != NO_SLOT_TO_SWAP:
                    log(f"comparison self-check ({fmt_case(case)}): {self_check}")
            if graph and "eager" in refs:
                lengths = make_lengths(case[3], case[1], case[2], case[0])
                row["graph_vs_eager_per_token"] = graph_vs_eager(torch, refs, fx.entry_pos, case[0], lengths)
            all_ok &= row["topk_equivalent"]
            saved[mode] = ref["topk"].cpu()
            rows.append(row)
            log(fmt_row(row))
        if dump:  # every tree saves its per-token top-k
            torch.save(saved, dump / f"{key}.pt")
        del refs
        fx.calls.last_logits = None
        if args.json:
            write_json(args, rows, calls, torch, t0, self_check, partial=True, **run_facts)
    write_json(args, rows, calls, torch, t0, self_check, partial=False, **run_facts)
    print_table(rows)
    if self_check and self_check.get("reason") == NO_SLOT_TO_SWAP:
        log("the comparison self-check found no case with a key left out of its top-k to swap in")
        all_ok = False
    elif not (self_check and self_check["detected"]):
        log("the comparison self-check did not detect a perturbed top-k row")
        all_ok = False
    if not all_ok:
        log("TOP-K MISMATCH not explained by the top-k kernel (see mismatch_rows / first_mismatch)")
    return 0 if all_ok else 1


def fmt_row(r):
    t = ""
    if r["per_token_us"] is not None:
        t = f" per-token {r['per_token_us']:8.1f} us  chosen {r['chosen_us']:8.1f} us  x{r['speedup']:.3f}"
    ties = sum(r["tie_rows"].values())
    expl = sum(r["explained_rows"].values())
    if expl:
        t += f"  explained by the top-k kernel: {expl} rows"
    gve = r.get("graph_vs_eager_per_token")
    if gve:
        t += f"  graph-vs-eager per-token: {gve['mismatch_rows']} rows differ, {gve['tie_rows']} tie rows"
    return (
        f"n={r['next_n']} B={r['batch_size']:3d} ctx={r['ctx']:5d} {r['lengths']:7s} "
        f"{'graph' if r['cuda_graph'] else 'eager'} {r['layout']:9s} q={r['kernel_q_chosen']} "
        f"identical={r['topk_identical']} equivalent={r['topk_equivalent']} logits_same={r['logits_bit_identical']} "
        f"ties={ties} rerun_diff={r['per_token_rerun_diff_rows']}{t}"
    )


def print_table(rows):
    print("\n| next_n | B | ctx | lengths | mode | layout | top-k identical | per-token us | chosen us | speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['next_n']} | {r['batch_size']} | {r['ctx']} | {r['lengths']} | "
            f"{'graph' if r['cuda_graph'] else 'eager'} | {r['layout']} | {r['topk_identical']} | "
            f"{r['per_token_us']} | {r['chosen_us']} | {r['speedup']} |"
        )


def write_json(args, rows, calls, torch, t0, self_check, partial, fixture=None, probe=None):
    if not args.json:
        return
    import sglang

    try:
        import deep_gemm

        dg = getattr(deep_gemm, "__version__", None) or _dist_version("sgl-deep-gemm")
    except ImportError:
        dg = None
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    cap = list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
    doc = dict(
        device=dev,
        compute_capability=cap,
        sglang=calls.tree.release,
        sglang_version_attr=getattr(sglang, "__version__", None),
        tree_adapter=calls.tree.describe(),
        sgl_kernel=_dist_version("sglang-kernel") or _dist_version("sgl-kernel"),
        env={k: os.environ[k] for k in sorted(os.environ) if k.startswith(("SGLANG_", "SGL_"))},
        tree=args.label,
        tree_path=str(Path(args.tree).resolve()),
        deep_gemm=dg,
        torch=torch.__version__,
        command=args.command or " ".join([Path(sys.executable).name] + sys.argv),
        grid=args.grid,
        modes=args.modes,
        fixture=dict(max_bs=fixture[0], max_ctx=fixture[1]) if fixture else None,
        pages=args.pages,
        # what the installed DeepGEMM answered to the tree's [B, next_n] rows probe (null: no probe)
        sm90_next_n_rows_probe=probe,
        index=dict(heads=INDEX_HEADS, head_dim=INDEX_HEAD_DIM, topk=INDEX_TOPK, page=PAGE, scale_fmt=SCALE_FMT),
        timing=dict(iters=args.iters, reps=args.reps, statistic="median us per indexer step"),
        exercised=[e["name"] for e in calls.exercised()],
        exercised_calls=calls.exercised(),
        watched_but_not_present=calls.missing,
        not_exercised=NOT_EXERCISED,
        comparison_self_check=self_check,
        partial=partial,
        elapsed_s=round(time.time() - t0, 1),
        rows=rows,
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(args.json) + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.json)


NOT_EXERCISED = [
    "Indexer.forward_cuda (wq_b/wk/weights_proj projections, k_norm, RoPE, Hadamard rotate_activation): "
    "q, head weights and keys are random; q goes through act_quant, keys through _store_index_k_cache",
    "the DSA sparse attention (FlashMLA) that consumes the top-k",
    "the model's CUDA-graph runner (DecodeCudaGraphRunner for TARGET_VERIFY): the graph is captured here "
    "around the indexer step alone, with the backend's own capture/replay metadata calls",
    "more than one layer, tensor/data parallelism, padded (dp-attention) batches",
]


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def log(msg):
    print(f"[indexer-step] {msg}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tree",
        default=str(REPO / "build" / "sglang" / "python"),
        help="folder that holds sglang/ (default: make apply's)",
    )
    ap.add_argument("--label", default="patched", choices=("patched", "pristine"))
    ap.add_argument("--grid", default="full", help=f"one grid or several, comma-separated: {', '.join(GRIDS)}")
    ap.add_argument("--modes", default="both", choices=sorted(MODES), help="eager steps, CUDA-graph replays or both")
    ap.add_argument("--plan", action="store_true", help="print the cases and the time estimate only (no GPU)")
    ap.add_argument("--json", help="write the results here (rewritten after every case)")
    ap.add_argument("--dump-topk", help="save this tree's top-k per case here (pristine run)")
    ap.add_argument("--compare-topk", help="compare against top-k saved here by a pristine run")
    ap.add_argument(
        "--fixture-grid",
        help="size the fixture for these grids too (comma-separated), e.g. a pristine run whose "
        "dump a run of larger grids compares with",
    )
    ap.add_argument(
        "--pages",
        default="random",
        choices=PAGES,
        help="each request's pages scattered over the pool, or in one run (as a fresh engine's allocator lays them)",
    )
    ap.add_argument("--iters", type=int, default=20, help="graph replays per timing sample")
    ap.add_argument("--reps", type=int, default=5, help="timing samples (median reported)")
    ap.add_argument("--time-eager", action="store_true", help="also time the eager step (host overhead included)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--command", help="the command line to record in the JSON")
    args = ap.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
