"""Upstream: what goes to sglang as pull requests: the grouping rule, branches, bodies, lint, and the /rerun-test commands.
May import: the core and rebase/ (a PR branch is the series carried onto upstream's main); commands import it."""
