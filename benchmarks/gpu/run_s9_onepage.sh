#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9: the tile's metadata in one vector load per token, one page per
# tile (scalar block-table entry, addresses = scalar base + fixed offsets, code bytes unmasked) and
# table_ahead in the launch config (common.py load_slots / _int2_tiles). 1) every kernel test with
# real compilation (4 parallel shards; the rest is skipped on a failure); 2) the same table-ahead
# on/off timing as call 1 (run_s9_table_ahead.sh), to compare with call 1's numbers; 3) Nsight
# Compute per-instruction stall samples and L2 sector excess of the folded split kernel as the
# engine launches it; 4) the engine with CUDA graphs on the tiny dense model against session 8's
# bf16 run of the same seeded model and prompts (baseline log in benchmarks/results/session9/baseline);
# 5) the decode table vs bf16 (4K-128K, batch 1-64).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 200 || { (cd $OUT && tar czf logs.tgz logs); exit 1; }
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
for tile in folded per-code; do
  run 60 ab_$tile python3 benchmarks/decode_attention.py --graph --table-ahead --tile $tile --block-size 128 \
    --contexts 32768,131072 --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
    --max-bf16-bytes 0 --out $OUT/logs/decode_ab_${tile}_h200.json
  grep -h "table ahead\|S= " $OUT/logs/ab_$tile.log | cut -c1-110
done
run 60 ncu ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis_Tables -o /tmp/ncu_op \
  python3 benchmarks/decode_profile.py --config 32/4/128 --tiles folded
ncu -i /tmp/ncu_op.ncu-rep --page source --csv --print-source sass > $OUT/ncu_onepage_sass.csv 2> $OUT/logs/ncu_src.err
ncu -i /tmp/ncu_op.ncu-rep --page details --csv > $OUT/logs/ncu_onepage_details.csv 2>&1
echo "source page: $(wc -l < $OUT/ncu_onepage_sass.csv) lines"
grep -h "Warp Cycles Per Issued\|excessive" $OUT/logs/ncu_onepage_details.csv | cut -c200-420
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run 130 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active" $OUT/logs/e2e_dense-int2-graph.log | cut -c1-100,300-460 | head -2
run 240 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_onepage_h200.json
grep -h "S= " $OUT/logs/decode_table.log | cut -c1-170
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
