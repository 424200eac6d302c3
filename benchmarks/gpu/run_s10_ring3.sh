#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10, call 3: the A/B call 2 could not finish (the paged window with
# prefix caching on, mamba 'align' mode, was still starting at its 150 s limit): 330 s this time,
# then hybrid27b generating at 32K with the ring (C = HYB_C, eager).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs /tmp/s5 /tmp/s10 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
tar xzf benchmarks/results/session10/ring_call1_logs.tgz -C /tmp/s10
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
cp /tmp/s10/logs/e2e_hybrid-int2-ring64.log $OUT/logs/e2e_hybrid-int2-ring64-call1.log
APHRODITE_INT2KV_RECENT_WINDOW=64 timeout 330 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-paged64-pc \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching on > $OUT/logs/e2e_hybrid-int2-paged64-pc.log 2>&1
echo "paged64-pc exit $? at ${SECONDS}s"
timeout $((570 - SECONDS)) python3 benchmarks/gpu/e2e_throughput.py --model-config hybrid27b --kv int2 --context 32768 \
  --concurrency "${HYB_C:-2}" --decode 32 --gpu-mem 0.8 --eager --out $OUT/e2e_hybrid32k_ring.jsonl > $OUT/logs/hyb32k_ring_gen.log 2>&1
echo "hybrid27b exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-paged64-pc \
  hybrid-int2-ring64-call1=hybrid-int2-paged64-pc > $OUT/ring3_summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/ring3_summary.json'))
for c in d['comparisons']: print(c)
print(d['kv_tokens'])"
grep -h "int2 recent window\|Maximum concurrency\|Error\|error" $OUT/logs/e2e_hybrid-int2-paged64-pc.log $OUT/logs/hyb32k_ring_gen.log | cut -c1-300 | head -12
tail -3 $OUT/logs/e2e_hybrid-int2-paged64-pc.log | cut -c1-300
cat $OUT/e2e_hybrid32k_ring.jsonl 2>/dev/null | cut -c1-400
(cd $OUT && tar czf ring3_logs.tgz logs && rm -r logs)
