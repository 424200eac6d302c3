#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 8, on the shipped kernels: Nsight Compute's memory view
# (SpeedOfLight, MemoryWorkloadAnalysis) of the split kernel at 32K and 128K, batch 8, shipped and
# floor (decode_profile.py --floor): why a 32-token tile's pace at 32K (~1.4 us) is slower than the
# same positions at 128K (~1.05 us) with or without the math (calls 5-7).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
which ncu > /dev/null || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
for run in "shipped32k 32768" "floor32k 32768 --floor" "shipped128k 131072" "floor128k 131072 --floor"; do
  set -- $run
  timeout 100 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy -o $OUT/ncu_$1 python3 benchmarks/decode_profile.py --config 32/4/128 --batch 8 \
    --context $2 --tiles folded ${3:-} > $OUT/logs/ncu_$1.log 2>&1
  echo "ncu $1 exit $? at ${SECONDS}s"
  ncu -i $OUT/ncu_$1.ncu-rep --page details > $OUT/logs/ncu_$1_details.txt 2>&1
  grep -h -i "^ *Duration\|DRAM Throughput\|Memory Throughput\|L2 Hit Rate\|L1/TEX Hit\|Mem Busy\|Max Bandwidth\|Mem Pipes\|L2 Compression\|Achieved Occupancy" $OUT/logs/ncu_$1_details.txt | cut -c1-110
done
(cd $OUT && tar czf ncu_mem_logs.tgz logs *.ncu-rep && rm -r logs *.ncu-rep)
