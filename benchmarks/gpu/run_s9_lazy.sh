#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9: the folded tile with lazy rescaling (running max raised only
# when a row's max grew by > 2^8) and the V bias summed per group and applied after the last tile
# (common.py int2_tile_folded / fold_bias): fewer per-element operations on the accumulators per
# tile (SASS loop 1,393 -> ~1,320 on the common path). The deferred bias cancels the 2^(10-2p)
# offsets only at the end, in fp32 -- the interpreter runs with offset 0, so only this call tests
# that arithmetic. 1) every kernel test with real compilation (4 shards; stop on a failure);
# 2) the decode rows of call 4 at 32K / 128K, batch 8-64 (int2 only; compare with
# session9/decode_attention_final_h200.json); 3) the engine with CUDA graphs on the tiny dense model.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 200 || { (cd $OUT && tar czf lazy_logs.tgz logs); exit 1; }
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 90 decode python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 32768,131072 \
  --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --max-bf16-bytes 0 \
  --out $OUT/decode_lazy_h200.json
grep -h "S=" $OUT/logs/decode.log | cut -c1-100
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run 130 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/lazy_e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/lazy_e2e_summary.json'))
for c in d['comparisons']: print(c)"
(cd $OUT && tar czf lazy_logs.tgz logs && rm -r logs)
