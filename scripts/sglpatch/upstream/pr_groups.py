"""The series' PR groups: which patches go upstream together (the Patch-Group trailer), and
patches/pr-groups.json, which names each group's PR (title, branch, what it depends on).

A line kept for users pinned to an older sglang (a backport line) says so in its pr-groups.json
(``"backport": "why"``): `pr` prepares no PR for it, since upstream takes PRs against main.

One rule for every command: patches sharing a Patch-Group trailer form one group, in the order
the group first appears in the series; a patch without the trailer is a group of its own, named
after the patch. `rerun` lists such a group; `pr` refuses it until pr-groups.json describes it.

Every group states its prior art (`prior_art`: [{"pr": N, "note": how this differs}], possibly
empty; `"repo": "owner/name"` for a PR outside sglang) and what its checklist may tick
(`checklist`: {item: what ran for it}, items from pr_body.CHECKLIST; an item left out stays
unticked); `numbers` is the main text's one table ([{"measure", "result", "ran"}], each result
beside what ran for it); `appendix` holds paragraphs for the body's collapsed appendix.
"""

from __future__ import annotations

import json
import re

from sglpatch.errors import FatalError
from sglpatch.series import Patch, Series
from sglpatch.upstream.pr_body import CHECKLIST, NUMBERS_COLUMNS, Group

GROUPS_FILE = "pr-groups.json"


def group_patches(patches: list[Patch]) -> list[tuple[str, list[Patch]]]:
    """(group id, its patches) in series order, by the rule above."""
    groups: dict[str, list[Patch]] = {}
    for patch in patches:
        groups.setdefault(patch.trailer("Patch-Group") or patch.name.removesuffix(".patch"), []).append(patch)
    return list(groups.items())


def _held(raw: dict, path) -> str | None:
    """A group's 'held': why `pr` prepares no PR for it (a fix nobody has shown a failure for, say)."""
    held = raw.get("held")
    if held is not None and (not isinstance(held, str) or len(held.split()) < 3):
        raise FatalError(f"{path}: group {raw['id']}'s 'held' says why no PR is sent (a sentence)")
    return held


def load_groups(series: Series) -> dict:
    path = series.directory / GROUPS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        upstream = data["upstream"]
        raw_groups = data["groups"]
    except FileNotFoundError:
        raise FatalError(f"{path} is missing: it names the PR groups") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise FatalError(f"{path} is not a valid PR group file ({exc})") from None
    by_group = dict(group_patches(series.patches))
    groups = []
    for raw in raw_groups:
        if not re.fullmatch(r"\[(DSA|Spec|Perf|Bugfix|Feature)\] .+", raw.get("title", "")):
            raise FatalError(f"{path}: group {raw.get('id')} needs a title starting with a tag like [DSA] or [Spec]")
        patches = by_group.pop(raw["id"], [])
        if not patches:
            raise FatalError(f"{path}: no patch has Patch-Group: {raw['id']}")
        groups.append(
            Group(
                raw["id"],
                raw["title"],
                raw["branch"],
                patches,
                raw.get("depends_on", []),
                raw.get("accuracy", []),
                raw.get("benchmark"),
                raw.get("accuracy_notes", []),
                raw.get("speed_notes", []),
                raw.get("engine"),
                _prior_art(raw, path),
                _checklist(raw, path),
                _texts(raw, "appendix", path),
                _numbers(raw, path),
                upstream,
                _held(raw, path),
            )
        )
    if by_group:
        raise FatalError(
            f"patches in no PR group of {path}: {', '.join(p.name for ps in by_group.values() for p in ps)}"
        )
    backport = data.get("backport")
    if backport is not None and not (isinstance(backport, str) and backport.strip()):
        raise FatalError(f"{path}: 'backport' says why the line sends no PR upstream (a sentence)")
    return {"upstream": upstream, "groups": groups, "backport": backport}


def _prior_art(raw: dict, path) -> list[dict]:
    items = raw.get("prior_art")
    well_formed = isinstance(items, list) and all(
        isinstance(i, dict)
        and {"pr", "note"} <= set(i) <= {"pr", "note", "repo"}
        and isinstance(i["pr"], int)
        and i["pr"] > 0
        and isinstance(i["note"], str)
        and i["note"].strip()
        and re.fullmatch(r"[\w.-]+/[\w.-]+", i.get("repo", "a/b"))
        for i in items
    )
    if not well_formed:
        raise FatalError(
            f"{path}: group {raw['id']} needs 'prior_art': a list of {{\"pr\": NUMBER, \"note\": how this PR "
            'differs}} ([] when there is none; "repo": "owner/name" for a PR outside sglang)'
        )
    return items


def _numbers(raw: dict, path) -> list[dict]:
    rows = raw.get("numbers", [])
    well_formed = isinstance(rows, list) and all(
        isinstance(r, dict)
        and set(r) == set(NUMBERS_COLUMNS)
        and all(isinstance(r[c], str) and r[c].strip() and "|" not in r[c] for c in NUMBERS_COLUMNS)
        for r in rows
    )
    if not well_formed:
        raise FatalError(
            f"{path}: group {raw['id']}: 'numbers' is a list of {{\"measure\", \"result\", \"ran\"}}, each a "
            "sentence without '|' (every result says what ran for it)"
        )
    return rows


def _checklist(raw: dict, path) -> dict[str, str]:
    checklist = raw.get("checklist")
    if not isinstance(checklist, dict):
        raise FatalError(
            f"{path}: group {raw['id']} needs 'checklist': {{item: what ran for it}} for the items it may tick "
            f"({', '.join(CHECKLIST)}; {{}} ticks none)"
        )
    for key, ran in checklist.items():
        if key not in CHECKLIST or not (isinstance(ran, str) and ran.strip()):
            raise FatalError(
                f"{path}: group {raw['id']}: checklist item {key!r} must be one of {', '.join(CHECKLIST)} and say "
                "what ran for it"
            )
    return checklist


def _texts(raw: dict, key: str, path) -> list[str]:
    texts = raw.get(key, [])
    if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        raise FatalError(f"{path}: group {raw['id']}: '{key}' is a list of paragraphs")
    return texts
