#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 5, on the shipped kernels: the per-program timeline
# (decode_timeline.py, CUDA-graph stamps) of the shipped launch and of decode_floor.py's launch
# (--floor: the tile's math mostly taken out) at batch 8, 32K: where the floor's 43-44 us go.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for side in floor; do
  flag=""; [ $side = floor ] && flag="--floor"
  timeout 200 python3 benchmarks/decode_timeline.py $flag --shapes 32/4/128/32768/8,16/2/256/32768/8,32/4/128/131072/8 \
    --out $OUT/decode_timeline_$side.json > $OUT/logs/timeline_$side.log 2>&1
  echo "timeline $side exit $? at ${SECONDS}s"; tail -2 $OUT/logs/timeline_$side.log | cut -c1-300
done
python3 - <<'PY'
import json, os
for side in ("shipped", "floor"):
    p = os.path.join(os.environ["OUT"], f"decode_timeline_{side}.json")
    if not os.path.exists(p): continue
    for r in json.load(open(p))["rows"]:
        print(side, r.get("shape"), {k: r[k] for k in r if k.startswith("graph_") and not isinstance(r[k], list)})
PY
(cd $OUT && tar czf timeline_logs.tgz logs && rm -r logs)
