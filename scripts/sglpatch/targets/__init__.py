"""The target: a checkout or package folder, what state it is in (target_state.read, the one reader), what a series would do to it (plan), and its records and safe writes.
May import: the core (sglpatch/*.py) only; commands and the other capabilities import it.

Named `targets/`, not `target/`: `target/` is the build output of Cargo and Maven, and the ignore files made for
them hide it at any depth (GitHub's Python.gitignore has the line too, for PyBuilder), so an editor, a search or a
linter that honours a global or copied ignore file would pass over the heart of the toolkit. No tool writes its
output to `targets/`.
"""
