#!/usr/bin/env python3
"""One GPU CI leg (`make ci-gpu`): apply the series, run the GPU tests, write junit + JSON summary.

  python ci/gpu_leg.py [--leg auto|h100|b200] [--sglang PATH] [--out STEM] [--python PY] [--jobs N]

The work is in scripts/sglpatch/gpu_leg.py; this file only puts scripts/ on the path so the
leg runs from a plain checkout of this repository, without installing the toolkit.
Exit status: 0 the leg passed its check, 1 it failed (the summary's check.problems say why),
2 it could not run (one line on stderr).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from sglpatch.gpu_leg import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
