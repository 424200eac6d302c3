#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 1: where batch 8 at 32K spends its 48 us.
# 1) benchmarks/decode_timeline.py: per-program %globaltimer stamps of the split and merge launches
#    (entry, first tile done, end; merge entry, after its wait, end) at four shapes;
# 2) Nsight Compute of the split kernel at 32K batch 8, head_dim 128 (the engine's launch: short
#    shares in tiles of 32): stall reasons per issued instruction and the SASS source page.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 benchmarks/decode_timeline.py --out $OUT/decode_timeline.json > $OUT/logs/timeline.log 2>&1
echo "timeline exit $? at ${SECONDS}s"; tail -5 $OUT/logs/timeline.log | cut -c1-2000
which ncu > /dev/null || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
timeout 150 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active \
  -o $OUT/ncu_b8 python3 benchmarks/decode_profile.py --config 32/4/128 --batch 8 --tiles folded > $OUT/logs/ncu_run.log 2>&1
echo "ncu exit $? at ${SECONDS}s"
ncu -i $OUT/ncu_b8.ncu-rep --page raw > $OUT/logs/ncu_raw.txt 2>&1
grep -i "issue_stalled" $OUT/logs/ncu_raw.txt | sort -k3 -g -r | head -14 | cut -c1-150
ncu -i $OUT/ncu_b8.ncu-rep --page details > $OUT/logs/ncu_details.txt 2>&1
grep -h -i "Duration\|Warp Cycles Per Issued\|Issued Warp Per\|Active Warps Per\|DRAM Throughput" $OUT/logs/ncu_details.txt | cut -c1-120
ncu -i $OUT/ncu_b8.ncu-rep --page source --csv --print-source sass > $OUT/logs/ncu_b8_sass.csv 2>&1
python3 benchmarks/ncu_hotspots.py $OUT/logs/ncu_b8_sass.csv 25
rm -f $OUT/ncu_b8.ncu-rep
(cd $OUT && tar czf timeline_logs.tgz logs && rm -r logs)
