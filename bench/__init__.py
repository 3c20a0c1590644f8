"""`make bench`: timings of the toolkit and of the paged-MQA layouts (also imported by tests/gpu)."""
