"""Loaded by every Python process of an engine-benchmark run (its folder is first on PYTHONPATH).

It does nothing unless SGLPATCH_ENGINE_PROBE_DIR is set; then bench/engine_probe/probe.py
hooks sglang's scheduler process (see there). It never changes what sglang computes.
"""

import os

if os.environ.get("SGLPATCH_ENGINE_PROBE_DIR"):
    import engine_probe_hooks

    engine_probe_hooks.install(os.environ["SGLPATCH_ENGINE_PROBE_DIR"])
