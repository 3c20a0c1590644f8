#!/usr/bin/env python3
"""Drive sglang's own DSA attention test kit (sglang/test/kits/attention_unittest) as pytest tests.

One pytest test per kit case or implementation variant, so a junit report names each one.
Run it through the CLI, which also writes a JSON summary:

  python ci/dsa_kit_driver.py --junit OUT.xml --summary OUT.json [--expect auto|pristine|patched|none]
      [--label NAME] [--command "how this was started"] [--patches-record applied.json] [-- PYTEST ARGS]

or plainly with `pytest ci/dsa_kit_driver.py` (no summary then).  It needs sglang, sgl_kernel,
deep_gemm and a CUDA GPU on the path; see ci/run_dsa_kit.sh for the air-gapped box.

Layout observation: for every forward the DSA backend prepares, the driver notes the paged-MQA
layout of the indexer metadata, without changing what runs:
  * `field`:    the value of the metadata's layout field, where the tree has one (our patch 1
                adds it; pristine v0.5.14 has none);
  * `inferred`: the layout implied by the shape of the 2D context lengths handed to DeepGEMM's
                schedule (`paged_mqa_ctx_lens_2d`): [B*next_n, 1] per-token, [B, next_n] native,
                [B*next_n/2, 2] paired;
  * `deep_gemm_ctx_lens_shapes`: the shapes DeepGEMM's get_paged_mqa_logits_metadata was really called
                with during the test.
TARGET_VERIFY tests then assert the layout expected for the GPU and tree (see expected_layout).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
import unittest
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------
# Case table (shapes follow upstream's test_dsa.py for the same kit entry points)
# ---------------------------------------------------------------------------
HEADS = 4
PAGE = 64

# run_dsa_sparse_attention_case over the kit's own make_dsa_sparse_cases("dsa")
# (names are read from the kit at run time; listed here so collection needs no GPU)
SPARSE_CASE_NAMES = (
    "dsa_sparse_prefill_flashmla_sparse_topk",
    "dsa_sparse_prefill_long_extend",
    "dsa_sparse_prefill_multi_request",
    "dsa_sparse_decode_flashmla_kv_topk",
    "dsa_sparse_decode_short_prefix_padding",
    "dsa_sparse_decode_ragged_prefix",
    "dsa_sparse_decode_long_prefix",
)
# TARGET_VERIFY: (prefix_lens, next_n).  next_n = draft tokens per request = extend length.
TARGET_VERIFY_CASES = (((128,), 2), ((128,), 3), ((128,), 4))
# Not in upstream's file (run after the upstream-shaped cases so a failure cannot spoil them):
# two requests, and eight requests -- the series only leaves per-token on SM90 from a minimum
# batch size (SM90_PAGED_MQA_MIN_BATCH_SIZE in dsa_backend.py), so bs8 is where native/paired run.
TARGET_VERIFY_BS2_CASES = (((128, 192), 2), ((128, 192), 3), ((128, 192), 4))
BS8_PREFIX = (64, 96, 128, 150, 192, 200, 230, 256)
TARGET_VERIFY_BS8_CASES = ((BS8_PREFIX, 2), (BS8_PREFIX, 3), (BS8_PREFIX, 4))
# the series' switch that forces per-token whatever the GPU
FORCE_PER_TOKEN_ENV = "SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN"
DECODE_IMPLS = ("flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "trtllm", "aiter")


# ---------------------------------------------------------------------------
# Environment facts
# ---------------------------------------------------------------------------
def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def fa3_in_kernel_package() -> bool:
    spec = importlib.util.find_spec("sgl_kernel")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(any(Path(loc).glob("flash_ops*.so")) for loc in spec.submodule_search_locations)


def environment_facts() -> dict:
    facts = {
        "python": platform.python_version(),
        "host": platform.node(),
        "sglang": _dist_version("sglang"),
        "sglang_kernel": _dist_version("sglang-kernel", "sgl-kernel"),
        "deep_gemm": _dist_version("sgl-deep-gemm", "deep-gemm"),
        "flashinfer": _dist_version("flashinfer-python"),
        "transformers": _dist_version("transformers"),
        "fa3_in_bundle": fa3_in_kernel_package(),
    }
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
            major, minor = torch.cuda.get_device_capability(0)
            facts["compute_capability"] = f"{major}.{minor}"
            facts["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    except Exception as exc:  # pragma: no cover - reported, not fatal
        facts["torch_error"] = repr(exc)
    try:
        import deep_gemm

        facts["deep_gemm_module_version"] = getattr(deep_gemm, "__version__", None)
    except Exception as exc:
        facts["deep_gemm_error"] = repr(exc)
    return facts


# ---------------------------------------------------------------------------
# Layout observation
# ---------------------------------------------------------------------------
def normalize_layout(value) -> str | None:
    """Map a layout value of any spelling (enum, str, int-backed enum) to per_token/native/paired."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        text = f"{value.name} {value.value}"
    else:
        text = str(value)
    t = text.lower().replace("-", "_")
    if "pair" in t:
        return "paired"
    if "native" in t or "2d" in t:
        return "native"
    if "token" in t or "1d" in t or "flat" in t:
        return "per_token"
    return f"unknown:{text}"


def infer_from_ctx_lens(ctx_lens, batch_size: int, next_n: int) -> str | None:
    if ctx_lens is None or not hasattr(ctx_lens, "shape") or ctx_lens.dim() != 2:
        return None
    rows, cols = tuple(ctx_lens.shape)
    if cols == 1:
        return "per_token"
    if next_n >= 2 and cols == next_n and rows == batch_size:
        return "native"
    if cols == 2 and next_n > 2 and rows * 2 == batch_size * next_n:
        return "paired"
    return f"unknown:{rows}x{cols}"


def _layout_fields(obj) -> dict:
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    else:
        names = list(getattr(obj, "__dict__", {}))
    return {n: getattr(obj, n, None) for n in names if "layout" in n.lower()}


class LayoutRecorder:
    """Wraps DeepseekSparseAttnBackend's metadata builders and DeepGEMM's schedule call; every
    wrapper calls the original first and only reads afterwards."""

    def __init__(self):
        self.current: str | None = None
        self.records: dict[str, list[dict]] = {}
        self.dg_calls: dict[str, list[list[int]]] = {}
        self.installed = False
        self.field_names: set[str] = set()

    def _note(self, backend, forward_mode, batch_size, where: str) -> None:
        if self.current is None:
            return
        try:
            md = getattr(backend, "forward_metadata", None)
            fields = _layout_fields(md)
            if (
                not fields
                and forward_mode is not None
                and (forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2())
            ):
                # the field may live on the indexer metadata only: build it (pure) to read it
                try:
                    fb = _FakeFB(forward_mode)
                    fields = _layout_fields(backend.get_indexer_metadata(0, fb))
                except Exception:
                    pass
            next_n = int(getattr(backend, "speculative_num_draft_tokens", 0) or 0)
            ctx = getattr(md, "paged_mqa_ctx_lens_2d", None)
            rec = {
                "where": where,
                "forward_mode": getattr(forward_mode, "name", str(forward_mode)),
                "batch_size": batch_size,
                "next_n": next_n,
                "field": {k: str(v) for k, v in fields.items()},
                "field_layout": next((normalize_layout(v) for v in fields.values()), None),
                "ctx_lens_2d_shape": list(ctx.shape) if hasattr(ctx, "shape") else None,
                "inferred": infer_from_ctx_lens(ctx, batch_size or 0, next_n),
            }
            self.field_names.update(fields)
            self.records.setdefault(self.current, []).append(rec)
        except Exception as exc:  # never disturb the test
            self.records.setdefault(self.current, []).append({"where": where, "error": repr(exc)})

    def install(self) -> None:
        if self.installed:
            return
        from sglang.srt.layers.attention import dsa_backend as mod

        cls = mod.DeepseekSparseAttnBackend
        rec = self

        def wrap(name, mode_of, bs_of):
            orig = getattr(cls, name, None)
            if orig is None:
                return

            @functools.wraps(orig)
            def wrapper(self, *a, **k):
                out = orig(self, *a, **k)
                try:
                    rec._note(self, mode_of(a, k), bs_of(a, k), name)
                except Exception:
                    pass
                return out

            setattr(cls, name, wrapper)

        def fb_mode(a, k):
            fb = a[0] if a else k.get("forward_batch")
            return getattr(fb, "forward_mode", None)

        def fb_bs(a, k):
            fb = a[0] if a else k.get("forward_batch")
            return getattr(fb, "batch_size", None)

        def kw(name, pos):
            return lambda a, k: k.get(name, a[pos] if len(a) > pos else None)

        wrap("init_forward_metadata", fb_mode, fb_bs)
        # CUDA-graph capture and replay share one body in v0.5.14:
        #   _apply_cuda_graph_metadata(bs, req_pool_indices, seq_lens, seq_lens_cpu, forward_mode, ...)
        wrap("_apply_cuda_graph_metadata", kw("forward_mode", 4), kw("bs", 0))
        #   init_forward_metadata_replay_cuda_graph_from_precomputed(bs, precomputed, forward_mode)
        wrap("init_forward_metadata_replay_cuda_graph_from_precomputed", kw("forward_mode", 2), kw("bs", 0))

        dg = getattr(mod, "deep_gemm", None)
        if dg is not None and hasattr(dg, "get_paged_mqa_logits_metadata"):
            orig_dg = dg.get_paged_mqa_logits_metadata

            @functools.wraps(orig_dg)
            def dg_wrapper(ctx_lens, *a, **k):
                if rec.current is not None and hasattr(ctx_lens, "shape"):
                    rec.dg_calls.setdefault(rec.current, []).append(list(ctx_lens.shape))
                return orig_dg(ctx_lens, *a, **k)

            dg.get_paged_mqa_logits_metadata = dg_wrapper
        self.installed = True


class _FakeFB:
    def __init__(self, mode):
        self.forward_mode = mode


RECORDER = LayoutRecorder()
RESULTS: list[dict] = []


def sm90_min_batch_size() -> int:
    """The patched tree keeps per-token on SM90 below a batch size it names; 1 if it names none."""
    try:
        from sglang.srt.layers.attention import dsa_backend

        return int(getattr(dsa_backend, "SM90_PAGED_MQA_MIN_BATCH_SIZE", 1))
    except Exception:
        return 1


def expected_layout(next_n: int, batch_size: int, sm_major: int, tree: str) -> str | None:
    """Layout rule of the series (shared/design/series.md, patch 1), written out independently of
    the patched code: SM100 -> native for next_n >= 2 (as upstream); SM90 -> native for next_n == 2,
    paired for even next_n >= 4, per-token otherwise and below the SM90 minimum batch size; the
    force-per-token switch wins.  Pristine v0.5.14: native on SM100, per-token on SM90."""
    if tree == "none":
        return None
    if next_n < 2:
        return "per_token"
    if tree == "patched" and os.environ.get(FORCE_PER_TOKEN_ENV, "").lower() in ("1", "true", "yes"):
        return "per_token"
    if sm_major == 10:
        return "native"
    if sm_major == 9:
        if tree == "pristine" or batch_size < sm90_min_batch_size():
            return "per_token"
        if next_n == 2:
            return "native"
        if next_n % 2 == 0:
            return "paired"
        return "per_token"
    return None  # no rule asserted for other GPUs


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kit():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDA is required")
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods import dsa_attention as dsa
    from sglang.test.kits.attention_unittest.runner_modes import (
        cuda_graph_decode_runner as cg,
    )
    from sglang.test.kits.attention_unittest.runner_modes import (
        speculative_draft_runner as draft,
    )

    RECORDER.install()
    return dict(dsa=dsa, cg=cg, draft=draft, ForwardMode=ForwardMode, torch=torch)


@pytest.fixture
def tc(request):
    """A unittest.TestCase the kit can call skipTest/assert* on; SkipTest becomes a pytest skip."""
    RECORDER.current = request.node.nodeid
    yield unittest.TestCase()
    RECORDER.current = None


def _case(kit, name, mode, prefix_lens, extend_lens=()):
    return kit["dsa"].DSAAttentionCase(
        name=name,
        backend="dsa",
        forward_mode=getattr(kit["ForwardMode"], mode),
        num_heads=HEADS,
        num_kv_heads=1,
        page_size=PAGE,
        prefix_lens=tuple(prefix_lens),
        extend_lens=tuple(extend_lens),
    )


def _tree() -> str:
    return os.environ.get("DSA_KIT_EXPECT", "none")


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPARSE_CASE_NAMES)
def test_sparse_case(kit, tc, name):
    cases = {c.name: c for c in kit["dsa"].make_dsa_sparse_cases("dsa")}
    if name not in cases:
        pytest.fail(f"kit has no sparse case {name}; it has {sorted(cases)}")
    kit["dsa"].run_dsa_sparse_attention_case(tc, cases[name])


def _run_target_verify(kit, tc, request, prefix_lens, next_n):
    case = _case(
        kit,
        f"dsa_sparse_target_verify_bs{len(prefix_lens)}_n{next_n}",
        "TARGET_VERIFY",
        prefix_lens,
        (next_n,) * len(prefix_lens),
    )
    kit["dsa"].run_dsa_sparse_speculative_forward_mode_case(tc, case)
    recs = [r for r in RECORDER.records.get(request.node.nodeid, []) if r.get("forward_mode") == "TARGET_VERIFY"]
    assert recs, "the DSA backend built no TARGET_VERIFY metadata (layout recorder saw nothing)"
    major = kit["torch"].cuda.get_device_capability(0)[0]
    want = expected_layout(next_n, len(prefix_lens), major, _tree())
    for r in recs:
        r["expected"] = want
    seen_field = {r["field_layout"] for r in recs}
    seen_inferred = {r["inferred"] for r in recs}
    # shown in the junit report as <property> entries of this test case
    for key, value in (
        ("paged_mqa_layout_expected", want),
        ("paged_mqa_layout_field", ",".join(sorted(map(str, seen_field)))),
        ("paged_mqa_layout_inferred", ",".join(sorted(map(str, seen_inferred)))),
        ("paged_mqa_ctx_lens_2d_shapes", str([r["ctx_lens_2d_shape"] for r in recs])),
    ):
        request.node.user_properties.append((key, str(value)))
    if _tree() == "patched":
        assert seen_field != {None}, (
            "patched tree expected, but the DSA metadata carries no layout field "
            f"(fields named *layout* seen: {sorted(RECORDER.field_names)})"
        )
    if want is not None:
        if seen_field != {None}:
            assert seen_field == {want}, f"layout field says {seen_field}, expected {want}"
        assert seen_inferred == {want}, (
            f"2D context lengths imply {seen_inferred} "
            f"(shapes {[r['ctx_lens_2d_shape'] for r in recs]}), expected {want}"
        )


def _ids(cases):
    return [f"bs{len(p)}-next_n{n}" for p, n in cases]


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_CASES, ids=_ids(TARGET_VERIFY_CASES))
def test_target_verify(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


def test_draft_extend_v2(kit, tc):
    case = _case(kit, "dsa_sparse_draft_extend_v2", "DRAFT_EXTEND_V2", (128,), (3,))
    kit["dsa"].run_dsa_sparse_speculative_forward_mode_case(tc, case)


@pytest.mark.parametrize("impl", DECODE_IMPLS)
def test_decode_impl_variant(kit, tc, impl):
    if impl == "fa3" and not fa3_in_kernel_package():
        pytest.skip("fa3: FA3 kernels (sgl_kernel/flash_ops.abi3.so, 1.7 GB) are not in the bundle")
    if impl == "tilelang" and importlib.util.find_spec("tilelang") is None:
        pytest.skip("tilelang: the tilelang package is not installed on this box")
    major, minor = kit["torch"].cuda.get_device_capability(0)
    if impl == "trtllm" and (major, minor) != (10, 0):
        pytest.skip(f"trtllm: needs SM100 (B200); this GPU is SM{major}{minor}")
    if impl == "aiter" and kit["torch"].version.hip is None:
        pytest.skip("aiter: HIP/AMD only")
    case = _case(kit, "dsa_sparse_decode_impl_variant", "DECODE", (128,))
    kit["dsa"].run_dsa_sparse_decode_impl_variant_case(tc, case, impl)


def test_cuda_graph_decode(kit, tc):
    case = _case(kit, "runner_cuda_graph_dsa_sparse_decode_flashmla_kv", "DECODE", (127, 128))
    kit["cg"].run_dsa_sparse_cuda_graph_decode_case(tc, case)


def test_eagle_draft_cuda_graph_runner(kit, tc):
    case = _case(kit, "runner_eagle_draft_decode_cuda_graph_dsa_chain", "DECODE", (128, 192))
    kit["draft"].run_dsa_eagle_draft_cuda_graph_runner_case(tc, case)


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_BS2_CASES, ids=_ids(TARGET_VERIFY_BS2_CASES))
def test_target_verify_two_requests(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


@pytest.mark.parametrize("prefix_lens,next_n", TARGET_VERIFY_BS8_CASES, ids=_ids(TARGET_VERIFY_BS8_CASES))
def test_target_verify_eight_requests(kit, tc, request, prefix_lens, next_n):
    _run_target_verify(kit, tc, request, prefix_lens, next_n)


@pytest.mark.parametrize("next_n", (2, 4), ids=lambda n: f"bs8-next_n{n}")
def test_target_verify_forced_per_token(kit, tc, request, monkeypatch, next_n):
    monkeypatch.setenv(FORCE_PER_TOKEN_ENV, "1")
    _run_target_verify(kit, tc, request, BS8_PREFIX, next_n)


# ---------------------------------------------------------------------------
# Summary plugin + CLI
# ---------------------------------------------------------------------------
def _test_module_recorder() -> LayoutRecorder:
    """pytest imports this file again as a test module (not as __main__); the layouts were
    recorded by that copy, so read its recorder."""
    me = Path(__file__).resolve()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if mod is not sys.modules.get("__main__") and f and Path(f).resolve() == me:
            rec = getattr(mod, "RECORDER", None)
            if rec is not None:
                return rec
    return RECORDER


class SummaryPlugin:
    def __init__(self, path: Path, meta: dict):
        self.path = path
        self.meta = meta
        self.tests: dict[str, dict] = {}
        self.t0 = time.time()

    def pytest_runtest_logreport(self, report):
        entry = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "duration_s": 0.0})
        entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
        if (
            report.when == "call"
            or (report.when == "setup" and report.outcome != "passed")
            or (report.when == "teardown" and report.outcome == "failed")
        ):
            if report.skipped:
                entry["outcome"] = "skipped"
                lr = report.longrepr
                entry["reason"] = lr[2] if isinstance(lr, tuple) else str(lr)
            elif report.failed:
                entry["outcome"] = "failed" if report.when == "call" else "error"
                text = str(report.longrepr)
                entry["reason"] = text.strip().splitlines()[-1][:500] if text.strip() else ""
                entry["longrepr_tail"] = text[-3000:]
            elif report.when == "call":
                entry["outcome"] = "passed"

    def pytest_sessionfinish(self, session, exitstatus):
        rec = _test_module_recorder()
        counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
        for nodeid, t in self.tests.items():
            t.setdefault("outcome", "error")
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
            t["layouts"] = rec.records.get(nodeid, [])
            t["deep_gemm_ctx_lens_shapes"] = rec.dg_calls.get(nodeid, [])
        layouts = {}
        for nodeid, t in self.tests.items():
            if "target_verify" in nodeid or "draft_extend" in nodeid:
                recs = [r for r in t["layouts"] if r.get("forward_mode") in ("TARGET_VERIFY", "DRAFT_EXTEND_V2")]
                layouts[nodeid.split("::")[-1]] = {
                    "outcome": t["outcome"],
                    "expected": sorted({str(r.get("expected")) for r in recs if "expected" in r}),
                    "field": sorted({str(r.get("field_layout")) for r in recs}),
                    "inferred": sorted({str(r.get("inferred")) for r in recs}),
                    "ctx_lens_2d_shapes": [r.get("ctx_lens_2d_shape") for r in recs],
                    "deep_gemm_ctx_lens_shapes": t["deep_gemm_ctx_lens_shapes"],
                }
        summary = dict(self.meta)
        summary.update(
            {
                "environment": environment_facts(),
                "layout_field_names_seen": sorted(rec.field_names),
                "layout_recorder_installed": rec.installed,
                "sm90_min_batch_size": sm90_min_batch_size(),
                "counts": counts,
                "exit_status": int(exitstatus),
                "wall_s": round(time.time() - self.t0, 1),
                "layouts_seen": layouts,
                "skipped": {
                    t["nodeid"].split("::")[-1]: t.get("reason")
                    for t in self.tests.values()
                    if t["outcome"] == "skipped"
                },
                "failed": {
                    t["nodeid"].split("::")[-1]: t.get("reason")
                    for t in self.tests.values()
                    if t["outcome"] in ("failed", "error")
                },
                "tests": list(self.tests.values()),
            }
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        print(f"[dsa-kit] summary: {counts} -> {self.path}", flush=True)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    ap = argparse.ArgumentParser(description="run sglang's DSA kit as pytest tests")
    ap.add_argument("--junit", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument(
        "--expect",
        choices=("auto", "pristine", "patched", "none"),
        default="auto",
        help="layout rule to assert in TARGET_VERIFY (auto: patched if patches applied)",
    )
    ap.add_argument("--label", default="")
    ap.add_argument("--command", default="", help="the command line that started this run")
    ap.add_argument("--patches-record", help="JSON written by ci/apply_series.py")
    args = ap.parse_args(argv)

    patches = []
    if args.patches_record and Path(args.patches_record).exists():
        patches = json.loads(Path(args.patches_record).read_text())
    expect = args.expect
    if expect == "auto":
        expect = "patched" if patches else "pristine"
    os.environ["DSA_KIT_EXPECT"] = expect
    meta = {
        "label": args.label or expect,
        "command": args.command,
        "tree": expect,
        "patches": patches,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    plugin = SummaryPlugin(Path(args.summary), meta)
    pytest_args = [
        str(Path(__file__).resolve()),
        "-v",
        "-rs",
        "-p",
        "no:cacheprovider",
        f"--junitxml={args.junit}",
        "-o",
        "junit_family=xunit2",
        "-o",
        f"junit_suite_name=dsa_kit_{meta['label']}",
    ]
    if importlib.util.find_spec("pytest_timeout") is not None:
        pytest_args += ["--timeout=300"]
    return int(pytest.main(pytest_args + extra, plugins=[plugin]))


if __name__ == "__main__":
    sys.exit(main())
