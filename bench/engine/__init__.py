"""sglang's own engine with MTP, pristine against patched: the engine benchmark's parts.

``bench/engine_ab.py`` is its command line; ``bench/engine_worker.py`` the process each engine runs
in, ``bench/engine_probe/`` what that process reads out of sglang's scheduler. Here, one duty a
module:

- ``grid``: the grids of cases (requests x context x lengths) and the prompt pool they share;
- ``sizing``: what each engine is built to hold for a grid, and the ``sglang.Engine`` arguments
  that ask for it;
- ``memory``: whether every engine of a run fits the GPU at once, checked before anything starts;
- ``processes``: one engine's process: its start, its commands, its cores, its end;
- ``schedule``: which cores each engine gets and the order engines start and run in;
- ``measures``: what one engine's runs measured (verify forward, step interval, the decode step's
  parts, TPOT, tokens/s, the indexer's share);
- ``compare``: output tokens, and the verdict at every verify and draft position, compared;
- ``rows``: one case's JSON row: the engines side by side, their ratios and the A/A floor;
- ``driver``: a whole run: the engines of each next_n, each case's runs, the JSON;
- ``report``: tables and a picture from runs' JSONs (``make engine-report``).
"""
