"""sglang's own engine with MTP, pristine against patched, on one GPU: the command line.

The benchmark itself moved to bench/engine/driver.py; this keeps its command line and its names.

    python bench/engine_ab.py --pristine P/ --patched X/ --next-n 2,4 --out engine.json
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engine.driver import *  # noqa: E402,F401,F403
from bench.engine.driver import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
