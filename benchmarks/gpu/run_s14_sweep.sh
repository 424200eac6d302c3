#!/usr/bin/env bash
# H200 call (nvidia-h200), session 14, call 2, on main's kernels (.ab/int2kv_base = main too: the
# same-process noise floor). Where does the split kernel lose time at 32K batch 8, head_dim 128
# (52.3 us, 3x needs 49.3), and in the steady state (128K, 58-59 % of copy)?
# 1) launch sweep: tile length / pipeline stages / programs per multiprocessor (decode_ab --variants
#    --per-sm); 2) Nsight Compute of the split kernel as the engine launches it (batch 8 and 32, 32K),
#    with source counters (the SASS lines that stall).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 --contexts 32768,131072 \
  --batches 8,32 --variants 64/1/3,64/1/2,32/1/3,32/1/4,32/1/6 --per-sm 12,16 --out $OUT/decode_sweep_d128.json > $OUT/logs/sweep_d128.log 2>&1
echo "sweep d128 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/sweep_d128.log | cut -c1-400
timeout 120 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 16/2/256 --contexts 32768,131072 \
  --batches 8,32 --variants 32/1/3,32/1/4,16/1/4,16/1/6 --per-sm 8,12 --out $OUT/decode_sweep_d256.json > $OUT/logs/sweep_d256.log 2>&1
echo "sweep d256 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/sweep_d256.log | cut -c1-400
which ncu > /dev/null || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
for b in 8 32; do
  timeout 120 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section SourceCounters --section InstructionStats \
    python3 benchmarks/decode_profile.py --config 32/4/128 --batch $b --tiles folded > $OUT/ncu_32_4_128_b$b.txt 2>&1
  echo "ncu b$b exit $? at ${SECONDS}s"
done
grep -h -i "Duration\|Registers Per\|Achieved Active\|Warp Cycles Per Issued\|Issued Warp Per\|No Eligible\|Eligible Warps\|DRAM Throughput\|L2 Cache Throughput\|L2 Hit\|Mem Busy\|Executed Ipc A" $OUT/ncu_*.txt | cut -c1-110
(cd $OUT && tar czf sweep_logs.tgz logs && rm -r logs)
