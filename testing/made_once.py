"""What a session fixture makes, made once per test run instead of once per pytest-xdist worker.

`make test` runs the suite on two workers (pytest-xdist), two processes, each with its own session-scoped
fixtures, and `tests/toolkit/` and `tests/reliability/` each define them in their own conftest: the release
chain (four wheels laid out as commits, some 10 s on the 2-core machine) was built twice a run, the base repo up
to four times. `made_once(tmp_path_factory, name, build)` builds a folder once for the
run, under the base temp folder the workers share (the parent of each worker's own), behind a lock: the first
worker to ask builds it and the other waits for it, then takes it as it is. So what is built must stay
read-only to the tests, as a session fixture's tree already is (a test changes its own clone or copy). Without
xdist (one process) it is a plain folder of the session's own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

SHARED_FOLDER = "made-once"  # beside the workers' popen-gwN folders


def made_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name`, made by `build(folder)` once per test run (once per worker's session without xdist)."""
    worker, own = os.environ.get("PYTEST_XDIST_WORKER"), tmp_path_factory.getbasetemp()
    # an xdist worker's own folder is <run's>/popen-<worker>; a pytest a worker's test starts (check-patches)
    # inherits the variable but is no worker, and its base temp folder says so: it keeps to its own folder
    if not worker or own.name != f"popen-{worker}":
        folder = tmp_path_factory.mktemp(name, numbered=True)
        build(folder)
        return folder
    shared = own.parent / SHARED_FOLDER
    shared.mkdir(exist_ok=True)
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, and by the kernel if the worker dies
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part way in the other worker
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
