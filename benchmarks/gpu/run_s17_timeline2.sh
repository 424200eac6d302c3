#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 2: the timeline again, with the raw stamps
# (decode_timeline.pt) and the per-multiprocessor view of the split programs' ends.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 benchmarks/decode_timeline.py --out $OUT/decode_timeline2.json > $OUT/timeline2.log 2>&1
echo "timeline exit $? at ${SECONDS}s"
python3 -c "
import json
for r in json.load(open('$OUT/decode_timeline2.json'))['rows']:
    print(r['shape'], r['event_us_untraced'], 'end', r['split_end_us'], 'smlast', r['sm_last_end_us'], 'smrange', r['sm_end_range_us'], 'corr', r['entry_rank_vs_end_rank_corr'])
"
