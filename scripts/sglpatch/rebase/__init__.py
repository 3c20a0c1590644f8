"""The rebase: sglang releases as git commits (and a line's default base built from one), the one replay engine, drift, and the rebase itself.
May import: the core and targets/ (a rebase writes a checkout and keeps its state there); upstream/ and commands import it.
"""
