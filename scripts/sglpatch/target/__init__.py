"""The target: a checkout or package folder, what state it is in (target_state.read, the one reader), what a series would do to it (plan), and its records and safe writes.
May import: the core (sglpatch/*.py) only; commands and the other capabilities import it."""
