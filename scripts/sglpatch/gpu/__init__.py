"""The GPU legs: running a leg on a GPU box (apply, sglang's DSA tests, the kit, tests/gpu), the one environment probe, and a leg's summary and verdict.
May import: the core only; commands and ci/ import it."""
