"""Write safety, in the core: the one durable write (durable), SIGINT/SIGTERM held during a write and the fault points at each (interrupts), which run is writing (run_mark), scratch named after its run (scratch).
May import: the core only; every write to a target or to patches/ goes through it.

What lets a run be killed at any instant and settled after (docs/architecture.md, "How to add a write point to
the fault grid"; docs/reliability.md). A core package, not a capability: the top level and every capability use it.
"""
