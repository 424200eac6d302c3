#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 5: the merge split over the head dimension
# (int2_decode merge_split / merge_warps; calls 1-2 timed ~5.6 us from the split launch's last
# program to the merge's end). 1) decode kernel tests with real compilation; 2) A/B against main
# (.ab/int2kv_base) with five merge shapes; 3) the timeline with merge 4/2.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
K="merge_split or deals_tiles or dependent_launches or engine_launch or sinks_and_window" \
  bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for cfg in "d128 32/4/128" "d256 16/2/256"; do
  set -- $cfg
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --merge 2/4,4/4,4/2,8/2,8/1 --out $OUT/decode_ab_merge_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq\|rror" $OUT/logs/ab_$1.log | cut -c1-300
done
timeout 100 python3 benchmarks/decode_timeline.py --shapes 32/4/128/32768/8,16/2/256/32768/8 --merge 4/2 \
  --out $OUT/decode_timeline_merge42.json > $OUT/logs/timeline.log 2>&1
echo "timeline exit $? at ${SECONDS}s"
python3 -c "
import json
for r in json.load(open('$OUT/decode_timeline_merge42.json'))['rows']:
    print(r['shape'], r['merge'], r['event_us_untraced'], 'split end', r['split_end_us']['p100'], 'merge wait', r['merge_after_wait_us'], 'merge end', r['merge_end_us'])
"
(cd $OUT && tar czf merge_logs.tgz logs && rm -r logs)
