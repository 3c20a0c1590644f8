"""Loaded by every Python process of an engine-benchmark run (its folder is first on PYTHONPATH).

It does nothing unless SGLPATCH_ENGINE_PROBE_DIR is set; then bench/engine_probe/probe.py
hooks sglang's scheduler process (see there), and SIGUSR2 dumps every thread's stack to the log.
It never changes what sglang computes.
"""

import os

if os.environ.get("SGLPATCH_ENGINE_PROBE_DIR"):
    import faulthandler
    import signal

    # A stalled engine is stopped with this signal first (bench/engine/processes.py): each of its processes
    # writes every thread's stack to its log, which says where it hung
    faulthandler.register(signal.SIGUSR2, all_threads=True)

    import engine_probe_hooks

    engine_probe_hooks.install(os.environ["SGLPATCH_ENGINE_PROBE_DIR"])
