"""pin.json's release date: from the wheel's setuptools-scm record, else from PyPI; never a made-up one."""

from __future__ import annotations

import urllib.error
import zipfile

import pytest

from sglpatch import wheels
from sglpatch.errors import FatalError
from sglpatch.rebase.releases import release_date
from sglpatch.wheels import fetch_wheel

NAME = "sglang-0.5.99-cp311-cp311-manylinux_2_34_x86_64.whl"


@pytest.fixture
def wheel_without_scm_record(tmp_path):
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
        archive.writestr("sglang-0.5.99.dist-info/METADATA", "Name: sglang\nVersion: 0.5.99\n")
    return path


def test_offline_without_a_record_refuses_rather_than_inventing_a_date(wheel_without_scm_record, monkeypatch):
    def offline(url):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(wheels, "pypi_json", offline)
    with pytest.raises(FatalError) as refused:
        release_date(wheel_without_scm_record, "0.5.99")
    assert "pin.json needs that date" in str(refused.value) and "1970" not in str(refused.value)


def test_without_a_record_the_day_pypi_received_that_wheel(wheel_without_scm_record, monkeypatch):
    listed = {
        "urls": [
            {"filename": "sglang-0.5.99-cp310-cp310-manylinux_2_34_x86_64.whl", "upload_time": "2026-07-24T23:59:00"},
            {"filename": NAME, "upload_time": "2026-07-25T00:12:07"},
        ]
    }
    monkeypatch.setattr(wheels, "pypi_json", lambda url: listed)
    assert release_date(wheel_without_scm_record, "0.5.99") == "2026-07-25"


@pytest.mark.network
def test_0_5_16_has_no_record_and_gets_its_pypi_upload_day():
    wheel = fetch_wheel("0.5.16")
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if n.endswith("scm_version.json")]
    assert release_date(wheel, "0.5.16") == "2026-07-25"
