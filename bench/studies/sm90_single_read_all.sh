#!/usr/bin/env bash
# The whole issue-17 measurement on the H200, in one call (the `run` tool, carry .gpu-bundle):
#   bash bench/studies/run_sm90_single_read.sh bash bench/studies/sm90_single_read_all.sh
# 1. sweep kernel configurations on 4 shapes per next_n, choose one per next_n (geomean speedup);
# 2. the full grid (next_n 3, 4 x B 1-128 x ctx 4k-64k x uniform/ragged) with that choice, side by side
#    with DeepGEMM per-token and paired; 3. an ncu profile of one shape; 4. the GPU tests.
set -uo pipefail
O="${OUT:-.}"
python3 bench/studies/sm90_single_read.py --sweep --out "$O" --name sweep --next-n 4 3 --batch-sizes 64 16 \
  --ctx 65536 16384 --lengths ragged --reps 10 > "$O/sweep.log" 2>&1 || { tail -30 "$O/sweep.log"; exit 1; }
grep chosen "$O/sweep.log"
python3 bench/studies/sm90_single_read.py --out "$O" --config-json "$O/sweep_config.json" --reps 15 2>&1 | tee "$O/grid.log"
timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
  --section SchedulerStats --section LaunchStats -k regex:'single_read|sm90_fp8_paged_mqa_logits' --launch-count 3 \
  python3 bench/studies/sm90_single_read.py --profile --next-n 4 --batch-sizes 64 --ctx 65536 \
  --config-json "$O/sweep_config.json" > "$O/ncu.txt" 2>&1; echo "ncu rc $?"
python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_sm90_single_read.py 2>&1 | tail -15 | tee "$O/pytest.log"
