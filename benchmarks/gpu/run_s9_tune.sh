#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9, with table_ahead in the launch config (folded tile at
# head_dim <= 128): 1) every kernel test with real compilation, in 4 parallel shards (compiling is
# what takes the time); 2) launch sweep of the folded tile with table_ahead (more pipeline stages
# now that copies stay in flight, larger tiles); 3) Nsight Compute per-instruction stall samples of
# the folded split kernel as the engine launches it (where in the loop the warps wait).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT 240
timeout 150 python3 benchmarks/decode_tune.py --fold --table-ahead --per-sm 8,16 \
  --variants 64/1/3,64/1/4,64/1/2,128/2/3,128/2/4,32/1/4 --out $OUT/decode_tune_table_ahead.json \
  > $OUT/decode_tune_table_ahead.log 2>&1; echo "tune exit $? at ${SECONDS}s"; grep -v "^ " $OUT/decode_tune_table_ahead.log | tail -8 | cut -c1-400
timeout 90 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o $OUT/ncu_folded_ta \
  python3 benchmarks/decode_profile.py --config 32/4/128 --tiles folded > $OUT/ncu_run.log 2>&1
echo "ncu exit $? at ${SECONDS}s"
ncu -i $OUT/ncu_folded_ta.ncu-rep --page source --csv --print-source sass > $OUT/ncu_folded_ta_sass.csv 2> $OUT/ncu_src.err
echo "source page: $(wc -l < $OUT/ncu_folded_ta_sass.csv) lines"; head -c 600 $OUT/ncu_folded_ta_sass.csv; head -3 $OUT/ncu_src.err
ncu -i $OUT/ncu_folded_ta.ncu-rep --page details --csv > $OUT/ncu_folded_ta_details.csv 2>&1
grep -i "duration\|stall\|warp cycles per issued" $OUT/ncu_folded_ta_details.csv | cut -c1-200 | head -20
