#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8: Nsight Compute on the split-KV decode kernel, folded and
# per-code tiles, 32q/4kv/D128 batch 8 at 32K (the engine's launch): the register-cap sweep
# (run_s8_tune.sh) changed nothing, so the tile is not occupancy-bound; which unit or stall is it?
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
which ncu || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
for cfg in 32/4/128 16/2/256; do
  timeout 240 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy --section InstructionStats \
    python3 benchmarks/decode_profile.py --config $cfg --tiles folded > $OUT/ncu_folded_${cfg//\//_}.txt 2>&1
  echo "ncu $cfg folded exit $? at ${SECONDS}s"
done
timeout 200 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  python3 benchmarks/decode_profile.py --config 32/4/128 --tiles per-code > $OUT/ncu_percode_32_4_128.txt 2>&1
echo "ncu per-code exit $? at ${SECONDS}s"
grep -h -i "Duration\|Memory Throughput\|DRAM Throughput\|Compute (SM) Throughput\|Stall\|Issue Slots Busy\|Achieved Occupancy\|L1/TEX Hit\|L2 Hit\|Mem Busy\|Max Bandwidth" $OUT/ncu_*.txt | head -60
