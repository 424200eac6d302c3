#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 4: the timeline on the transposed split grid, with an
# even deal and with tier weights both ways (call 3: weighting the first dispatch tier up was
# slower): do the dispatch tiers still finish in launch order, and how do the weights move them?
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 benchmarks/decode_timeline.py --shapes 32/4/128/131072/8,32/4/128/32768/8 \
  --tiers 10:9:8:8,8:9:10:10,7:9:11:11 --out $OUT/decode_timeline3.json > $OUT/timeline3.log 2>&1
echo "timeline exit $? at ${SECONDS}s"; grep -i "error" $OUT/timeline3.log | head
python3 -c "
import json
for r in json.load(open('$OUT/decode_timeline3.json'))['rows']:
    print(r['shape'], r['tiers'], r['event_us_untraced'], 'tiers', r['tier_mean_end_us'], 'end', r['split_end_us'], 'smrange', r['sm_end_range_us']['p50'], 'corr', r['entry_rank_vs_end_rank_corr']['p50'])
"
