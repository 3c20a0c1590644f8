"""Test scaffolding shared by the suites (imported as `testing.*`; pytest puts the project root on
sys.path through `pythonpath` in pyproject.toml):

- `testing.sglang_trees`: real sglang v0.5.14 trees from the cached PyPI wheel, a small real test
  series, and the fixtures built on them (tests/toolkit and tests/reliability use them);
- `testing.fault_harness`: the fault grid: run an operation, cut it at a write point with a signal,
  and check byte for byte that `recover` leaves the target as it was or fully patched.
"""
