"""The DSA indexer step of a TARGET_VERIFY forward through sglang's own code: bench/indexer_step.py's parts.

- ``grids``: the grids of cases (next_n x requests x context x lengths), their lengths and seeds,
  and the time a grid's timed replays take;
- ``trees``: what differs between the sglang releases the step runs on;
- ``fixture``: the sglang tree imported, the calls observed, and the fixture (the DSA test kit's
  mock runner, a real backend per variant, the index-K cache);
- ``topk_compare``: two top-k results compared row by row, ties explained, and the comparison's
  own self-check;
- ``case``: one case's variants (forced per-token and the layout chosen), eager and CUDA graph,
  timed and compared into one row.

bench/indexer_step.py is the command line and the run over a grid.
"""
