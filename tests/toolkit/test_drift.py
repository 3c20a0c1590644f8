"""drift on real releases: the project's own series against 0.5.14, 0.5.15 and 0.5.16 wheels."""

from __future__ import annotations

import json

import pytest

from sglpatch.lines import default_patch_dir
from sglpatch.series import load_series

pytestmark = pytest.mark.network  # releases 0.5.15 and 0.5.16 from PyPI, unless cached

RELEASES = "0.5.14,0.5.15,0.5.16"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from sglpatch import cli

    out = tmp_path_factory.mktemp("drift")
    assert cli.main(["drift", "--releases", RELEASES, "--out", str(out)]) == 0
    return out


def test_the_table_is_printed_as_the_file_has_it(tmp_path, capsys):
    """stdout shows the markdown line by line (a line break escaped into one line is only for a path)."""
    from sglpatch import cli

    assert cli.main(["drift", "--line", "v0.5.14", "--releases", "0.5.15", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    written = (tmp_path / "v0.5.14" / "drift.md").read_text().splitlines()
    start = printed.index(written[0])
    assert printed[start : start + len(written)] == written and "| patch | 0.5.15 |" in printed


def test_a_line_break_in_a_conflicting_file_name_stays_inside_its_cell():
    from sglpatch.rebase.drift import cell_text
    from sglpatch.rebase.replay import Landing, Outcome

    outcome = Outcome(patch=None, kind=Landing.CONFLICT, files=["python/sglang/odd\nname.py"])
    assert cell_text(outcome) == "conflict: odd\\nname.py"


def test_the_expected_truth_for_the_real_releases(report):
    """#29787 (in 0.5.15) is upstream's version of patches 3-4; nothing upstream runs SM90 native."""
    data = json.loads((report / "v0.5.14" / "drift.json").read_text())["releases"]
    names = [p.name for p in load_series(default_patch_dir()).patches]
    assert all(data["0.5.14"][n]["outcome"] == "clean" for n in names)
    # patches 3-4 and 6 carry #29787, patch 5 carries #29413 (both in 0.5.15); patches 1-2 only extend #27166
    carried = names[2:]
    for release in ("0.5.15", "0.5.16"):
        assert [data[release][n]["outcome"] for n in carried] == ["upstream"] * len(carried)
        assert all(data[release][n]["outcome"] != "upstream" for n in names if n not in carried)
        assert all("marker" in data[release][n]["detail"] for n in carried)


def test_markdown_and_picture_are_written(report):
    markdown = (report / "v0.5.14" / "drift.md").read_text()
    header = next(line for line in markdown.splitlines() if line.startswith("| patch |"))
    assert header == "| patch | 0.5.14 | 0.5.15 | 0.5.16 |"
    rows = [line for line in markdown.splitlines() if line.startswith("| 000")]
    assert len(rows) == len(load_series(default_patch_dir()).patches)
    png = (report / "v0.5.14" / "drift.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_a_narrow_picture_keeps_its_title_and_legend_whole(tmp_path):
    """Issue 36: with one release column the title and the legend ran off the picture's edges. Now its border is
    background all round: nothing drawn was cut."""
    import matplotlib.image

    from sglpatch import cli

    assert cli.main(["drift", "--line", "v0.5.14", "--releases", "0.5.15", "--out", str(tmp_path)]) == 0
    pixels = matplotlib.image.imread(tmp_path / "v0.5.14" / "drift.png")[..., :3]
    edges = {"top": pixels[0], "bottom": pixels[-1], "left": pixels[:, 0], "right": pixels[:, -1]}
    cut = [side for side, row in edges.items() if row.min() < 0.9]
    assert not cut, f"something is drawn up to the {', '.join(cut)} edge of the picture: it was cut there"


def test_upstream_json_is_what_the_earlier_lines_drift_finds():
    """Issue 48: patches/v0.5.23/upstream.json was edited by hand and recorded patches 3-4 while drift found
    3-6 upstream from 0.5.15. `make drift DOCS=1` writes it; the committed one is what the committed drift says."""
    from sglpatch.lines import all_lines, newest_line
    from sglpatch.project import PROJECT_ROOT
    from sglpatch.rebase.drift import upstream_prs, upstream_records

    lines = [line for line in all_lines() if not line.project.from_git]  # sglang's: released on PyPI
    checked = 0
    for earlier in lines:
        report = PROJECT_ROOT / "docs" / "drift" / earlier.name / "drift.json"
        releases = json.loads(report.read_text())["releases"] if report.is_file() else {}
        prs = upstream_prs(load_series(earlier.directory).patches)
        for later in lines:
            if later.release in releases and later is not earlier:
                assert later.upstreamed() == upstream_records(releases, later.release, prs), later.name
                checked += 1
    assert checked >= 1
    newest = newest_line().upstreamed()  # sglang's newest line (DeepGEMM's lines are listed after it)
    names = [r["patch"][:4] for r in newest]
    assert names == ["0003", "0004", "0005", "0006"] and {r["release"] for r in newest} == {"0.5.15"}


def test_upstream_records_count_from_the_release_a_patch_has_been_upstream_since():
    from sglpatch.rebase.drift import upstream_records

    def cell(outcome):
        return {"outcome": outcome, "detail": f"{outcome} here", "files": []}

    releases = {
        "0.5.14": {"a": cell("clean"), "b": cell("clean")},
        "0.5.15": {"a": cell("upstream"), "b": cell("conflict")},
        "0.5.16": {"a": cell("conflict"), "b": cell("upstream")},  # a reverted upstream: not since 0.5.15
        "0.5.17": {"a": cell("upstream"), "b": cell("upstream")},
    }
    assert upstream_records(releases, "0.5.17", {"a": 1, "b": None}) == [
        {"patch": "a", "upstream_pr": 1, "release": "0.5.17", "found": "upstream here"},
        {"patch": "b", "upstream_pr": None, "release": "0.5.16", "found": "upstream here"},
    ]
    assert upstream_records(releases, "0.5.15", {}) == [
        {"patch": "a", "upstream_pr": None, "release": "0.5.15", "found": "upstream here"}
    ]
