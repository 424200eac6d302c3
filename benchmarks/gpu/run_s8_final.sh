#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8, with the folded tile as the engine's decode tile (uniform
# levels): 1) the engine generates with it (tiny dense model: bf16, int2 default eager with a
# prefix-cache repeat, int2 default with CUDA graphs); 2) window 128 + 16 sinks cost over the folded
# int2 decode at 32K (issue #6's <= 10 %); 3) the decode table vs bf16 (4K-128K, batch 1-64) with the
# folded tile; 4) Nsight Compute stall reasons of the folded split kernel.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
run 90 e2e_dense-bf16 python3 $E --label dense-bf16 --model /tmp/models/qwen3 --kv auto
run 110 e2e_dense-int2-folded python3 $E --label dense-int2-folded --model /tmp/models/qwen3 --kv int2 --repeat
run 120 e2e_dense-int2-folded-graph python3 $E --label dense-int2-folded-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-folded dense-int2-folded-graph \
    > $OUT/folded_e2e_summary.json 2> $OUT/folded_e2e_summary.err
python3 -c "
import json; d = json.load(open('$OUT/folded_e2e_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "prefix-cache repeat\|int2 KV cache active" $OUT/logs/*.log | cut -c1-100,300-420 | sort | uniq
run 60 decode_window python3 benchmarks/decode_attention.py --graph --window 128 --sinks 16 --window-block-size 20 \
  --block-size 128 --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128,16/2/256 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_folded_h200.json
grep -h "window 128\|S= " $OUT/logs/decode_window.log | cut -c1-170 | head -12
run 230 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_folded_h200.json
grep -h "S= " $OUT/logs/decode_table.log | cut -c1-170
run 40 ncu_stalls ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,smsp__inst_executed_pipe_.*\\.sum \
  python3 benchmarks/decode_profile.py --config 32/4/128 --tiles folded
grep -h "stalled\|pipe" $OUT/logs/ncu_stalls.log | sort -k3 -n -r | head -30
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
