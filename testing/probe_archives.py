"""An engine call's archive as bench/engine_ab.py leaves it, made from probe step records, for the studies
that read such archives (bench/studies/host_modes.py, floor_design.py)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path


def steps_archive(path: Path, engines: dict[str, list[dict]]) -> str:
    """``path`` (a .tar.gz) holding ``probe-n4-<label>/steps.jsonl`` with each engine's records."""
    with tarfile.open(path, "w:gz") as tar:
        for label, records in engines.items():
            data = "\n".join(json.dumps(r) for r in records).encode()
            info = tarfile.TarInfo(f"./probe-n4-{label}/steps.jsonl")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)
