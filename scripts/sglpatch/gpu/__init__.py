"""The GPU legs: running a leg on a GPU box (apply, sglang's DSA tests, the kit, tests/gpu), the one environment probe, and a leg's summary and verdict.
May import: the core only (gpu_environment nothing at all: it runs under the leg's own Python); commands and ci/ import it.
"""
