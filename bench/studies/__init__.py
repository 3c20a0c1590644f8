"""Finished studies, kept with their results in docs/: the single-read kernel (docs/sm90-single-read.md) and
the odd next_n split (docs/sm90-odd-next-n.md). `make bench` on a GPU still prints the single-read table."""
