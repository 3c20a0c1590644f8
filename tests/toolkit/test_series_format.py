"""The series format: the project's own series, and the parsers on hostile input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglpatch.errors import FatalError
from sglpatch.lines import all_lines, default_patch_dir
from sglpatch.message_format import missing_parts
from sglpatch.pin import load_pin, parse_pin
from sglpatch.series import load_series, parse_patch, parse_series_text

PROJECT_PATCHES = default_patch_dir()


@pytest.mark.parametrize("line", all_lines(), ids=lambda line: line.name)
def test_project_series_loads_with_checksums_and_notes(line):
    """Every line's patches hold what a patch's message must (the rule `export` refuses a commit by)."""
    series = load_series(line.directory)
    pin = load_pin(line.directory)
    assert series.patches, f"the {line.name} series is empty"
    for patch in series.patches:
        assert not missing_parts(patch), f"{patch.name} lacks {', '.join(missing_parts(patch))}"
        assert set(patch.touched_paths) <= set(pin.blobs), f"{patch.name} touches files the pin does not record"


def test_series_comments_and_quilt_options():
    text = "# header\n\n0001-a.patch\n0002-b.patch -p1  # trailing comment\n"
    assert parse_series_text(text) == ["0001-a.patch", "0002-b.patch"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("0001-a.patch\n0001-a.patch\n", "listed twice"),
        ("../0001-a.patch\n", "not a patch file name"),
        ("sub/0001-a.patch\n", "not a patch file name"),
        ("0001-a.diff\n", "not a patch file name"),
        ("# nothing\n", "lists no patches"),
        ("0001-a.patch -p0\n", "only the -p1 option"),
    ],
)
def test_series_refusals(text, message):
    with pytest.raises(FatalError, match=message):
        parse_series_text(text)


def test_crlf_and_binary_patches_are_refused():
    good = (PROJECT_PATCHES / load_series(PROJECT_PATCHES).patches[0].name).read_bytes()
    with pytest.raises(FatalError, match="CRLF"):
        parse_patch("x.patch", good.replace(b"\n", b"\r\n"))
    binary = good.split(b"\n@@")[0] + b"\nGIT binary patch\nliteral 4\nabcd\n"
    with pytest.raises(FatalError, match="binary"):
        parse_patch("x.patch", binary)
    with pytest.raises(FatalError, match="truncated|malformed"):
        parse_patch("x.patch", good[: len(good) // 3])


def test_corrupt_pin_is_refused():
    text = (PROJECT_PATCHES / "pin.json").read_text()
    for bad in (text[:40], text.replace('"blobs"', '"blobz"'), text.replace("0.5.14", "latest", 1), "[]"):
        with pytest.raises(FatalError, match="corrupt pin"):
            parse_pin(bad)


_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(st.text())
def test_series_parser_never_raises_anything_but_its_own_error(text):
    try:
        names = parse_series_text(text)
    except FatalError as exc:
        assert "\n" not in str(exc)
    else:
        assert len(names) == len(set(names)) and all("/" not in n for n in names)


@_settings
@given(st.binary() | st.text().map(str.encode))
def test_patch_parser_never_raises_anything_but_its_own_error(data):
    try:
        patch = parse_patch("fuzz.patch", b"From 0 Mon Sep 17 00:00:00 2001\n" + data)
    except FatalError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(p.startswith("python/sglang/") for p in patch.touched_paths)


@_settings
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_pin_parser_never_raises_anything_but_its_own_error(value):
    import json

    try:
        parse_pin(json.dumps(value))
    except FatalError as exc:
        assert "\n" not in str(exc)
