"""One module per command: each has `add_arguments(parser)` and `run(args) -> int`."""
