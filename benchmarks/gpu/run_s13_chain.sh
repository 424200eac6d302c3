#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13: tail -> split -> merge as programmatic dependent launches
# (the merge's loads masked by the lse as before). 1) every kernel test with real compilation, and
# the new dependent-launch test against a copy of this tree without the merge's gdc_wait (must fail);
# 2) A/B against d82f783 (.ab/int2kv_base) and this tree without PDL (.ab/int2kv_nopdl), without and
# with the engine's default window of 128; 3) the decode table; 4) the engine with CUDA graphs: the
# tiny dense model vs session 9's bf16, dense8b at 32K, C = 11 (bf16 550.1 tok/s, session 11).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
grep -h "dependent_launches" $OUT/logs/kernel_tests_shard_*.log | head -3
rm -rf /tmp/nowait && mkdir /tmp/nowait && cp -r aphrodite_int2kv aphrodite_int2kv_tests pyproject.toml /tmp/nowait/
python3 - <<'PY'
p = "/tmp/nowait/aphrodite_int2kv/kernels/decode.py"; s = open(p).read()
old = "        gdc_wait()      # launched as a dependent grid"; assert s.count(old) == 1
open(p, "w").write(s.replace(old, "        pass  # gdc_wait() removed"))
PY
(cd /tmp/nowait && timeout 120 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k dependent_launches \
  > $OUT/logs/nowait_test.log 2>&1; echo "without the merge's gdc_wait: pytest exit $? (1 = the test fails, as it must)"; tail -n1 $OUT/logs/nowait_test.log)
for w in 0 128; do
  for c in 32/4/128 16/2/256; do
    timeout 60 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
      --batches 1,8,32,64 --alt-modules int2kv_nopdl --window $w --out $OUT/decode_ab_chain_${c//\//_}_w$w.json > $OUT/logs/ab_${c//\//_}_w$w.log 2>&1
    echo "ab $c window $w exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}_w$w.log | cut -c1-200; grep -i "error\|capture failed" $OUT/logs/ab_${c//\//_}_w$w.log | head -3
  done
done
if [ $ok = 0 ]; then
  timeout 150 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
wait
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 120 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
run 200 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s13.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
(cd $OUT && tar czf chain_call2_logs.tgz logs && rm -r logs)
