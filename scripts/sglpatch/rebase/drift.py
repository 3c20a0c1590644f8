"""The drift report: patch x release, as markdown, JSON and a picture."""

from __future__ import annotations

import json
from pathlib import Path

from sglpatch.output import one_line, plural
from sglpatch.rebase.replay import Landing, Outcome

COLORS = {
    Landing.CLEAN: "#2e7d32",
    Landing.THREE_WAY: "#f9a825",
    Landing.CONFLICT: "#c62828",
    Landing.UPSTREAM: "#1565c0",
}
LEGEND = {
    Landing.CLEAN: "applies as it is",
    Landing.THREE_WAY: "applies with a 3-way merge",
    Landing.CONFLICT: "conflicts (files named)",
    Landing.UPSTREAM: "already upstream (drop it there)",
}


def cell_text(outcome: Outcome) -> str:
    if outcome.kind == Landing.CONFLICT:
        return "conflict: " + ", ".join(one_line(Path(f).name) for f in outcome.files)
    return outcome.kind


def render_markdown(
    matrix: dict[str, list[Outcome]], seconds: float, pin_release: str, wheels: str = "wheels cached"
) -> str:
    releases = list(matrix)
    names = [o.patch.name for o in matrix[releases[0]]]
    lines = [
        f"# Drift of the series (pinned at {pin_release}) across releases",
        "",
        "| patch | " + " | ".join(releases) + " |",
        "|---|" + "---|" * len(releases),
    ]
    for row, name in enumerate(names):
        cells = [cell_text(matrix[r][row]) for r in releases]
        lines.append(f"| {name.removesuffix('.patch')} | " + " | ".join(cells) + " |")
    lines += ["", "Legend: " + "; ".join(f"**{k}**: {v}" for k, v in LEGEND.items()) + "."]
    upstream_notes = sorted(
        {
            f"- {o.patch.name}: {o.detail}"
            for outcomes in matrix.values()
            for o in outcomes
            if o.kind == Landing.UPSTREAM
        }
    )
    if upstream_notes:
        lines += ["", "Why a patch counts as upstream:", *upstream_notes]
    lines += ["", f"Checked {plural(len(releases), 'release')} in {seconds:.1f} s ({wheels})."]
    return "\n".join(lines) + "\n"


def render_json(matrix: dict[str, list[Outcome]], seconds: float, command: str) -> str:
    data = {
        "command": command,
        "seconds": round(seconds, 2),
        "releases": {
            release: {o.patch.name: {"outcome": o.kind, "detail": o.detail, "files": o.files} for o in outcomes}
            for release, outcomes in matrix.items()
        },
    }
    return json.dumps(data, indent=2) + "\n"


def render_png(matrix: dict[str, list[Outcome]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch as LegendPatch

    releases = list(matrix)
    names = [o.patch.name.removesuffix(".patch") for o in matrix[releases[0]]]
    fig, ax = plt.subplots(figsize=(1.3 * len(releases) + 4, 0.7 * len(names) + 2), layout="constrained")
    for col, release in enumerate(releases):
        for row, outcome in enumerate(matrix[release]):
            ax.add_patch(plt.Rectangle((col, row), 0.96, 0.92, color=COLORS[outcome.kind]))
            label = outcome.kind if outcome.kind != Landing.CONFLICT else "conflict"
            ax.text(col + 0.48, row + 0.46, label, ha="center", va="center", color="white", fontsize=8)
    ax.set_xlim(0, len(releases))
    ax.set_ylim(len(names), 0)
    ax.set_xticks([c + 0.48 for c in range(len(releases))], releases, rotation=45, ha="right")
    ax.set_yticks([r + 0.46 for r in range(len(names))], names, fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    # the title and the legend belong to the figure, not the axes: with one or two release columns the axes
    # are narrower than either, and the saved picture is cut to what was drawn (nothing clipped)
    fig.suptitle(title)
    handles = [LegendPatch(color=COLORS[k], label=v) for k, v in LEGEND.items()]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.savefig(path, dpi=120, bbox_inches="tight", pad_inches=0.2)
    plt.close(fig)


def upstream_records(releases: dict[str, dict[str, dict]], release: str, prs: dict[str, int | None]) -> list[dict]:
    """A later line's upstream.json, from an earlier line's drift (drift.json's "releases": release -> patch ->
    {outcome, detail}): each patch found upstream at `release`, its Upstream-PR (`prs`), the release it has
    been upstream since without a break, and why (the drift's reason)."""
    order = list(releases)[: list(releases).index(release) + 1]
    records = []
    for name, cell in releases[release].items():
        if cell["outcome"] != Landing.UPSTREAM:
            continue
        since = release
        for earlier in reversed(order):
            if releases[earlier][name]["outcome"] != Landing.UPSTREAM:
                break
            since = earlier
        records.append({"patch": name, "upstream_pr": prs.get(name), "release": since, "found": cell["detail"]})
    return records


def upstream_prs(patches) -> dict[str, int | None]:
    """Each patch's Upstream-PR trailer as a number (None without one)."""
    return {p.name: int(pr) if (pr := p.trailer("Upstream-PR") or "").isdigit() else None for p in patches}
