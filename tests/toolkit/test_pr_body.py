"""PR bodies: what each GPU result ran, tables from the committed results, and the rules that make a body
stand alone for an upstream reader and readable in two minutes (no project-only path or term, a main text
of at most 4,000 characters with one table of numbers beside what ran for them, an appendix, prior art that
names every PR a trailer cites, a checklist that ticks only what ran). The rules render from a fixture
patch; the last tests render the line that goes upstream, as `make pr` does."""

from __future__ import annotations

import json

import pytest

from sglpatch.errors import FatalError
from sglpatch.lines import all_lines
from sglpatch.project import PROJECT_ROOT
from sglpatch.series import Series, load_series, parse_patch
from sglpatch.upstream.pr_body import MAIN_TEXT_LIMIT, Group, count_tables, render_body
from sglpatch.upstream.pr_groups import load_groups

FIXTURE_PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Ada Patchwright <ada@example.com>
Date: Mon, 30 Nov 2026 23:31:05 +0000
Subject: [PATCH] [DSA] Two query tokens per paged-MQA row on SM90

Why: one token per row streams each request's KV cache next_n times.

What: pick two tokens per row for even next_n; a test in sglang's tree.

Drop when: upstream does it.

Patch-Group: sm90-dg-native
Tests: tests/patched_v0_5_23/test_sm90_paged_mqa_indexer.py
Extends-PR: 27166
---
diff --git a/python/sglang/srt/layers/attention/dsa_backend.py b/python/sglang/srt/layers/attention/dsa_backend.py
index 1111111..2222222 100644
--- a/python/sglang/srt/layers/attention/dsa_backend.py
+++ b/python/sglang/srt/layers/attention/dsa_backend.py
@@ -1 +1 @@
-TOKENS_PER_ROW = 1
+TOKENS_PER_ROW = 2
diff --git a/test/registered/attention/test_rows.py b/test/registered/attention/test_rows.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/test/registered/attention/test_rows.py
@@ -0,0 +1 @@
+ROWS = 2
"""
PATCH = parse_patch("0001-rows.patch", FIXTURE_PATCH.encode())
EXTENDED = {"pr": 27166, "note": "[B, next_n] rows on SM100; this brings them to SM90"}


def _group(**fields) -> Group:
    fields.setdefault("prior_art", [EXTENDED])
    return Group("sm90-dg-native", "title", "branch", [PATCH], **fields)


def _main_and_appendix(body: str) -> tuple[str, str]:
    main, _, appendix = body.partition("<details><summary>Appendix</summary>")
    return main, appendix


def test_accuracy_notes_come_before_the_ci_summary():
    notes = ["What ran: the indexer.", "Not run: the attention."]
    body = render_body(_group(accuracy_notes=notes), PROJECT_ROOT, stack=[])
    accuracy = body.split("## Accuracy Tests", 1)[1].split("## Speed Tests", 1)[0]
    assert accuracy.index("What ran: the indexer.") < accuracy.index("Not run: the attention.")


def test_speed_table_from_the_indexer_step_benchmark_is_in_the_appendix():
    source = "docs/results/indexer_h200.json"
    main, speed = _main_and_appendix(render_body(_group(benchmark=source), PROJECT_ROOT, stack=[]))
    assert "The tables are in the appendix." in main and "| per-token us |" not in main
    data = json.loads((PROJECT_ROOT / source).read_text())
    graph_rows = [r for r in data["rows"] if r["cuda_graph"] and r["speedup"] and r["ctx"] == 65536]
    assert graph_rows
    for row in graph_rows:
        line = f"| {row['next_n']} | {row['lengths']} | {row['batch_size']} | {row['per_token_us']:.1f} | {row['layout']} |"
        assert line in speed
    assert "`Indexer._get_topk_paged`" in speed and source not in speed and "bench/" not in speed


def test_project_groups_say_what_their_gpu_results_ran():
    """Every group a line sends upstream that cites GPU results says what ran there and what did not."""
    cited = 0
    for line in all_lines():
        data = json.loads((line.directory / "pr-groups.json").read_text())
        if data.get("backport"):
            continue
        for group in data["groups"]:
            if not (group.get("accuracy") or group.get("benchmark") or group.get("engine")):
                continue
            cited += 1
            notes = " ".join(group["accuracy_notes"])
            everything = " ".join([notes, *group["speed_notes"], *group.get("appendix", [])])
            assert "on an H200" in notes and "Not run:" in everything, (line.name, group["id"])
            if group["accuracy"]:  # it cites the GPU CI summary, which predates this revision
                assert "previous revision of this series" in notes
    assert cited


def _engine_row(line, next_n, bs, verify=(2000.0, 1600.0)):
    return {
        "run": "engine_h200_run9.json",
        "line": line,
        "next_n": next_n,
        "batch_size": bs,
        "ctx": 65536,
        "lengths": "uniform",
        "speedup_verify": verify[0] / verify[1],
        "tokens_identical": 1.0,
        "pristine": {"verify_step_us": verify[0], "step_interval_ms": 8.0},
        "patched": {"verify_step_us": verify[1], "step_interval_ms": 7.5},
        "speedup_step_interval": 8.0 / 7.5,
        "aa_noise": {"verify": 1.004},
        "indexer_share": {"pristine": {"share": 0.25}, "patched": {"share": 0.12}},
    }


def test_speed_section_cites_the_engine_rows_of_its_line_first(tmp_path):
    run = {
        "run": "engine_h200_run9.json",
        "line": "v0.5.14",
        "parallel": "tp1",
        "command": "bash ci/run_engine_gpu.sh",
        "versions": {"gpu": "NVIDIA H200", "torch": "2.11.0", "sgl-deep-gemm": "0.1.5.post1", "sglang-kernel": "0.4.4"},
        "series": [{"name": "0001-x.patch", "sha256": "abc"}],
    }
    rows = [_engine_row("v0.5.14", 4, 32), _engine_row("v0.5.14", 3, 32), _engine_row("v0.5.23", 4, 32)]
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": rows}))
    group = _group(
        engine={"file": "engine.json", "line": "v0.5.14", "next_n": [4]}, speed_notes=["Indexer alone: see x."]
    )
    main, speed = _main_and_appendix(render_body(group, tmp_path, stack=[]))
    table = [line for line in speed.splitlines() if line.startswith("| 4 |") or line.startswith("| 3 |")]
    assert table == [
        "| 4 | 32 | 64k | uniform | 2000 -> 1600 | 1.250 | 1.004 | 8.00 -> 7.50 | 1.067 | 25% / 12% | 1.0 |"
    ]
    assert "torch 2.11.0, sgl-deep-gemm 0.1.5.post1, sglang-kernel 0.4.4" in speed
    assert "Indexer alone: see x." in main and "ci/run_engine_gpu.sh" not in speed  # a project command is left out


def test_an_engine_citation_can_name_its_runs(tmp_path):
    runs = [
        {"run": name, "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": []}
        for name in ("engine_h200_run1.json", "engine_h200_run9.json")
    ]
    rows = [{**_engine_row("v0.5.14", 2, 32), "run": "engine_h200_run1.json"}, _engine_row("v0.5.14", 2, 64)]
    (tmp_path / "engine.json").write_text(json.dumps({"runs": runs, "rows": rows}))
    group = _group(engine={"file": "engine.json", "runs": ["engine_h200_run9.json"]})
    speed = _main_and_appendix(render_body(group, tmp_path, stack=[]))[1]
    assert [line[:10] for line in speed.splitlines() if line.startswith("| 2 |")] == ["| 2 | 64 |"]
    assert "engine_h200_run1.json" not in speed


def test_speed_notes_are_main_text_and_the_engine_table_comes_before_the_indexer_step(tmp_path):
    run = {"run": "engine_h200_run9.json", "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": []}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [_engine_row("v0.5.14", 4, 32)]}))
    source = PROJECT_ROOT / "docs/results/indexer_h200.json"
    (tmp_path / "indexer.json").write_text(source.read_text())
    group = _group(
        engine={"file": "engine.json", "line": "v0.5.14"},
        benchmark="indexer.json",
        speed_notes=["The engine ran on the other line."],
    )
    main, appendix = _main_and_appendix(render_body(group, tmp_path, stack=[]))
    assert "The engine ran on the other line." in main.split("## Speed Tests and Profiling")[1]
    assert appendix.index("| 4 | 32 | 64k |") < appendix.index("The indexer step alone")


def test_an_engine_run_past_the_version_check_says_so_in_the_body(tmp_path):
    run = {
        "run": "engine_h200_v0_5_23_run9.json",
        "line": "v0.5.23",
        "parallel": "tp1",
        "versions": {},
        "series": [],
        "sgl_kernel_version_check_skipped": True,
    }
    row = {**_engine_row("v0.5.23", 2, 32), "run": run["run"]}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [row]}))
    group = _group(engine={"file": "engine.json", "line": "v0.5.23"})
    speed = _main_and_appendix(render_body(group, tmp_path, stack=[]))[1]
    [listed] = [line for line in speed.splitlines() if line.startswith("- `engine_h200_v0_5_23_run9.json`")]
    assert "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1" in listed


@pytest.mark.parametrize("digits", [64, 12], ids=["a run's own JSON", "the combined report"])
def test_an_engine_run_names_its_patches_and_whether_they_are_this_prs_commits(tmp_path, digits):
    """The series' own numbering (0001, 0002) means nothing upstream, and a run may have measured an earlier
    version of the change, or another patch under it: the list names each patch and says which are this PR's.
    The combined report (make engine-report) keeps 12 hex digits of each patch's sha256."""
    from sglpatch.series import sha256_hex

    series = [
        {"name": "0001-DSA-Run-SM90-paged-MQA-logits-in-one-DeepGEMM-call.patch", "sha256": "0" * digits},
        {"name": "0002-rows.patch", "sha256": sha256_hex(PATCH.data)[:digits]},
    ]
    run = {"run": "engine_h200_run9.json", "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": series}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [_engine_row("v0.5.14", 4, 32)]}))
    speed = _main_and_appendix(render_body(_group(engine={"file": "engine.json"}), tmp_path, stack=[]))[1]
    [listed] = [line for line in speed.splitlines() if line.startswith("- `engine_h200_run9.json`")]
    assert "patches 0001" not in listed
    assert "`DSA-Run-SM90-paged-MQA-logits-in-one-DeepGEMM-call` (not in this PR)" in listed
    assert "`rows` (this PR's commit)" in listed


def test_an_engine_run_on_an_earlier_version_of_the_change_says_so(tmp_path):
    series = [{"name": "0001-rows.patch", "sha256": "1" * 64}]
    run = {"run": "engine_h200_run9.json", "line": "v0.5.14", "parallel": "tp1", "versions": {}, "series": series}
    (tmp_path / "engine.json").write_text(json.dumps({"runs": [run], "rows": [_engine_row("v0.5.14", 4, 32)]}))
    speed = _main_and_appendix(render_body(_group(engine={"file": "engine.json"}), tmp_path, stack=[]))[1]
    assert "`rows` (an earlier version of this PR's commit)" in speed


@pytest.mark.parametrize(
    "path",
    [
        "docs/results/indexer_holdout_h200.md",
        "bench/indexer_step.py",
        "tests/patched_v0_5_23/test_sm90_paged_mqa_indexer.py",
        "patches/v0.5.23/series",
        "ci/run_gpu_layouts.sh",
        "docs/sm90-odd-next-n.md",
    ],
)
def test_a_body_citing_a_path_only_this_project_has_is_refused_naming_it(path):
    for where in ("accuracy_notes", "speed_notes", "appendix"):
        with pytest.raises(FatalError) as refusal:
            render_body(_group(**{where: [f"Measured on an H200 (`{path}`)."]}), PROJECT_ROOT, stack=[])
        assert str(refusal.value).startswith(f"the sm90-dg-native PR body cites {path}, a path only this project has")


def test_sglang_paths_and_the_series_test_files_do_not_trip_the_check():
    notes = [
        "`python/sglang/srt/layers/attention/dsa_backend.py`, `test/registered/attention/test_rows.py`, "
        "sglang's `docs/advanced_features/server_arguments.md` and https://github.com/sgl-project/sglang/pull/20115."
    ]
    main, _ = _main_and_appendix(render_body(_group(accuracy_notes=notes), PROJECT_ROOT, stack=[]))
    assert "Tests in sglang's tree this PR adds or changes: `test/registered/attention/test_rows.py`" in main
    assert "tests/patched" not in main  # the Tests: trailer names the series' own tests: not upstream's business


def test_a_main_text_over_the_limit_is_refused_and_the_appendix_does_not_count():
    long_notes = ["An H200 result, said at length. " * 70, "Another one, as long. " * 100]
    with pytest.raises(FatalError) as refusal:
        render_body(_group(accuracy_notes=long_notes), PROJECT_ROOT, stack=[])
    assert "main text is" in str(refusal.value) and f"more than {MAIN_TEXT_LIMIT:,}" in str(refusal.value)
    body = render_body(_group(accuracy_notes=["In short."], appendix=long_notes), PROJECT_ROOT, stack=[])
    main, appendix = _main_and_appendix(body)
    assert len(main) <= MAIN_TEXT_LIMIT and long_notes[0].strip() in appendix and body.rstrip().endswith("</details>")


def test_prior_art_is_a_section_and_the_checklist_ticks_only_what_the_group_says_ran():
    prior = [{"pr": 20115, "note": "the same pairing, closed unmerged; this PR picks it per batch size"}, EXTENDED]
    ran = {"unit_tests": "`test/registered/attention/test_rows.py` on an H200, eager and CUDA graph"}
    main, _ = _main_and_appendix(render_body(_group(prior_art=prior, checklist=ran), PROJECT_ROOT, stack=[]))
    assert "## Prior art\n\n- #20115: the same pairing, closed unmerged" in main
    ticks = [line for line in main.splitlines() if line.startswith("- [")]
    assert ticks == [
        "- [ ] Code formatted to sglang's style (its pre-commit hooks)",
        f"- [x] Unit tests added or updated: {ran['unit_tests']}",
        "- [ ] Documentation updated",
        "- [ ] Accuracy and speed results provided",
    ]
    plain = parse_patch("0001-rows.patch", FIXTURE_PATCH.replace("Extends-PR: 27166\n", "").encode())
    bare = render_body(Group("rows", "title", "branch", [plain]), PROJECT_ROOT, stack=[])
    assert "## Prior art\n\nNone named for this change." in bare and "- [x]" not in bare


@pytest.mark.parametrize(
    "change, refusal",
    [
        ({"prior_art": None}, "needs 'prior_art'"),
        ({"prior_art": [{"pr": "20115", "note": "x"}]}, "needs 'prior_art'"),
        ({"checklist": None}, "needs 'checklist'"),
        ({"checklist": {"pre_commit": "ran"}}, "checklist item 'pre_commit' must be one of format, unit_tests"),
        ({"checklist": {"format": ""}}, "checklist item 'format' must be one of"),
        ({"appendix": "one paragraph"}, "'appendix' is a list of paragraphs"),
    ],
)
def test_a_group_file_states_prior_art_and_what_its_checklist_may_tick(tmp_path, change, refusal):
    group = {"id": "sm90-dg-native", "title": "[DSA] Rows", "branch": "rows", "prior_art": [], "checklist": {}}
    series = Series(tmp_path, [PATCH])
    (tmp_path / "pr-groups.json").write_text(json.dumps({"upstream": "sgl-project/sglang", "groups": [group]}))
    assert load_groups(series)["groups"][0].checklist == {}
    group = {k: v for k, v in {**group, **change}.items() if v is not None}
    (tmp_path / "pr-groups.json").write_text(json.dumps({"upstream": "sgl-project/sglang", "groups": [group]}))
    with pytest.raises(FatalError) as error:
        load_groups(series)
    assert refusal in str(error.value) and str(error.value).count("\n") == 0


def test_a_pr_a_trailer_cites_is_named_in_prior_art_with_what_it_did():
    with pytest.raises(FatalError) as refusal:
        render_body(_group(prior_art=[]), PROJECT_ROOT, stack=[])
    assert "cites #27166 in a patch trailer but its prior_art does not name it" in str(refusal.value)
    main, _ = _main_and_appendix(render_body(_group(), PROJECT_ROOT, stack=[]))
    assert "Related:" not in main and f"- #27166: {EXTENDED['note']}" in main
    other = {"repo": "vllm-project/vllm", "pr": 52164, "note": "next_n 4 natively on SM90"}
    main, _ = _main_and_appendix(render_body(_group(prior_art=[EXTENDED, other]), PROJECT_ROOT, stack=[]))
    assert "- vllm-project/vllm#52164: next_n 4 natively on SM90" in main


@pytest.mark.parametrize(
    "said, plain",
    [
        ("the A/A was 0.99", "a pristine run against another pristine run"),
        ("on the hold-out grid", "a grid measured after the rule was fixed"),
        ("TPOT 1.00x (floor 0.98)", "two pristine processes against each other"),
        ("the DG-native path", "DeepGEMM's [B, next_n] rows"),
    ],
)
def test_a_term_only_this_project_uses_is_refused_with_the_plain_words(said, plain):
    for where in ("accuracy_notes", "speed_notes", "appendix"):
        with pytest.raises(FatalError) as refusal:
            render_body(_group(**{where: [f"Measured on an H200: {said}."]}), PROJECT_ROOT, stack=[])
        assert "a term only this project uses" in str(refusal.value) and plain in str(refusal.value)
    render_body(_group(speed_notes=["A floor-plan of the N/A/A test, held out of the run."]), PROJECT_ROOT, stack=[])


NUMBERS = [
    {"measure": "indexer step", "result": "1.16x median", "ran": "sglang's indexer, CUDA graphs, H200"},
    {"measure": "TPOT", "result": "1.00x (two pristine processes: 0.98)", "ran": "sglang's Engine, H200"},
]


def test_the_numbers_are_the_main_texts_one_table_each_beside_what_ran():
    main, _ = _main_and_appendix(render_body(_group(numbers=NUMBERS), PROJECT_ROOT, stack=[]))
    speed = main.split("## Speed Tests and Profiling", 1)[1].split("## Prior art", 1)[0]
    assert speed.lstrip().startswith("| measure | result | what ran |\n|---|---|---|\n")
    assert "| TPOT | 1.00x (two pristine processes: 0.98) | sglang's Engine, H200 |" in speed
    second = ["| a | b |\n|---|---|\n| 1 | 2 |"]
    with pytest.raises(FatalError) as refusal:
        render_body(_group(numbers=NUMBERS, accuracy_notes=second), PROJECT_ROOT, stack=[])
    assert "main text holds 2 tables" in str(refusal.value)
    body = render_body(_group(numbers=NUMBERS, appendix=second), PROJECT_ROOT, stack=[])
    assert second[0] in _main_and_appendix(body)[1]


@pytest.mark.parametrize("rows", [[{"measure": "x", "result": "1.1x"}], [{**NUMBERS[0], "ran": "a | b"}], "x"])
def test_a_group_files_numbers_say_what_ran_for_each(tmp_path, rows):
    group = {"id": "sm90-dg-native", "title": "[DSA] Rows", "branch": "rows", "prior_art": [EXTENDED]}
    group.update(checklist={}, numbers=rows)
    (tmp_path / "pr-groups.json").write_text(json.dumps({"upstream": "sgl-project/sglang", "groups": [group]}))
    with pytest.raises(FatalError) as error:
        load_groups(Series(tmp_path, [PATCH]))
    assert "'numbers' is a list of" in str(error.value)


def _newest_line_bodies() -> dict[str, str]:
    """Each PR body of the lines that go upstream (sglang's newest, the DeepGEMM line), from their own patches and
    pr-groups.json; held groups prepare none."""
    bodies = {}
    for line in all_lines():
        config = load_groups(load_series(line.directory))
        if config["backport"]:
            continue
        for group in config["groups"]:
            if not group.held:
                bodies[group.id] = render_body(group, PROJECT_ROOT, stack=[])
    return bodies


def test_the_bodies_that_go_upstream_keep_the_rules():
    """render_body refuses a body over the limits; this renders the line's own, so a note that breaks a
    rule fails here, not first in `make pr`."""
    bodies = _newest_line_bodies()
    assert bodies
    for group_id, body in bodies.items():
        main, _ = _main_and_appendix(body)
        assert len(main) <= MAIN_TEXT_LIMIT, group_id
        assert count_tables(main) == 1 and "| measure | result | what ran |" in main, group_id


def test_a_held_groups_body_cites_no_project_path_or_term(monkeypatch):
    """A held group goes upstream once its reason is gone; `make pr` then renders it for the first time, so a
    project path or term in its notes would first show there. Rendered here as if it were not held. Its length
    is not held to the limit here: a held group's numbers are rewritten when its reason goes (the v0.5.23
    line's sm90-dg-next-n-rows is over it today)."""
    import dataclasses

    from sglpatch.upstream import pr_body

    monkeypatch.setattr(pr_body, "MAIN_TEXT_LIMIT", 10**6)

    held = [
        group
        for line in all_lines()
        if not (config := load_groups(load_series(line.directory)))["backport"]
        for group in config["groups"]
        if group.held
    ]
    for group in held:
        render_body(dataclasses.replace(group, held=None), PROJECT_ROOT, stack=[])


def test_a_body_names_the_groups_stacked_on_it_except_held_ones():
    from sglpatch.commands.pr import stack_lines

    base = Group("rows", "[DSA] Rows", "rows", [PATCH])
    sent = Group("wider", "[DSA] Wider", "wider", [PATCH], depends_on=["rows"])
    held = Group("widest", "[DSA] Widest", "widest", [PATCH], depends_on=["rows"], held="Its kernel is not upstream.")
    lines = stack_lines(base, {"groups": [base, sent, held]}, {})
    assert any("`wider` PR" in line for line in lines)
    assert not any("widest" in line for line in lines)


def test_a_held_group_prepares_no_pr_and_a_group_on_it_is_refused(capsys):
    from sglpatch.commands.pr import _not_held
    from sglpatch.errors import FatalError

    held = Group("dirs", "title", "branch", [PATCH], held="It fixes no failure a user has reported.")
    kept = Group("kernel", "title", "branch", [PATCH])
    assert _not_held([held, kept]) == [kept]
    assert "dirs: held, no PR prepared: It fixes no failure" in capsys.readouterr().out
    on_it = Group("rows", "title", "branch", [PATCH], depends_on=["dirs"])
    with pytest.raises(FatalError, match="stacks on the held group dirs"):
        _not_held([held, on_it])
