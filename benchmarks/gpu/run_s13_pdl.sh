#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13: the merge launched as a programmatic dependent of the split
# launch (PDL; the tail kernel now runs first), its partial-result loads no longer masked by the
# lse loads. 1) every kernel test with real compilation; 2) A/B in one process against d82f783
# (.ab/int2kv_base), with this tree without PDL (.ab/int2kv_nopdl) and with bf16 partial results
# (.ab/int2kv_half); 3) the engine with CUDA graphs (PDL captured): tiny dense model vs session 9's bf16.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for c in 32/4/128 32/4/128--ragged 16/2/256; do
  cfg=${c%--ragged}; r=""; [ $cfg != $c ] && r=--ragged
  timeout 110 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $cfg --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --alt-modules int2kv_nopdl,int2kv_half $r --out $OUT/decode_ab_pdl_${cfg//\//_}$r.json > $OUT/logs/ab_${cfg//\//_}$r.log 2>&1
  echo "ab $c exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${cfg//\//_}$r.log | cut -c1-200; grep -i "error\|capture failed" $OUT/logs/ab_${cfg//\//_}$r.log | head -3
done
wait
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
timeout $((585 - SECONDS)) python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph \
  > $OUT/logs/e2e_dense-int2-graph.log 2>&1; echo "e2e exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
(cd $OUT && tar czf pdl_call1_logs.tgz logs && rm -r logs)
