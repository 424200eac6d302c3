#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: why is a head_dim-128 tile ~20 % slower per multiprocessor
# than a head_dim-256 tile with the same bytes (5 KB) and instructions (~1,100)? Nsight Compute
# warp-state and scheduler statistics of the split kernel as the engine launches it, batch 32, 32K,
# folded tile, heads-first pages (commit 0535d35's kernels).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
which ncu > /dev/null || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
for cfg in 32/4/128 16/2/256; do
  timeout 120 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/decode_profile.py --config $cfg --batch 32 --tiles folded > $OUT/ncu_${cfg//\//_}.txt 2>&1
  echo "ncu $cfg exit $? at ${SECONDS}s"
done
grep -h -i "Duration\|Registers Per\|Achieved Occupancy\|Theoretical Occupancy\|Warp Cycles Per Issued\|Issued Warp Per\|No Eligible\|Active Warps Per\|Eligible Warps\|Memory Throughput\|DRAM Throughput\|L2 Hit\|L1/TEX Hit\|Mem Busy\|Block Limit" $OUT/ncu_*.txt | cut -c1-120
grep -h -A3 "stall\|Stall" $OUT/ncu_*.txt | grep -v "^--" | cut -c1-200 | head -40
