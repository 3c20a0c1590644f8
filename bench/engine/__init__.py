"""sglang's own engine with MTP, pristine against patched: the engine benchmark (bench/engine_ab.py, its command line)."""
