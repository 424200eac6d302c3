#!/usr/bin/env bash
# (Runs only on commits dc098d4..3e8e40d: row_merge and decode_ab --row-merge were reverted after call 6.)
# H200 calls (nvidia-h200), session 21, calls 5 (dc098d4) and 6 (3e8e40d: counts on their own 128-byte lines,
# failed polls napping 0.5 us): int2_decode row_merge (each merge program waits for
# its own row's split programs, counted per sequence and head tile, instead of the whole split
# launch; session 20's next step 3). First its GPU tests (a merge that read early or counts left
# behind fail them; a wrong count would hang, hence the timeout), then ABBA decode_ab: base (.ab =
# 942b711, the shipped kernels), new (this tree, row_merge off: the same SASS), new/rowmerge.
# Also checks gpu_state's bus-id query (benchmarks/decode_attention.py).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
# gpu_state asks nvidia-smi for this process's GPU by PCI bus id (no longer by torch's index)
python3 -c "import torch; from benchmarks.decode_attention import gpu_state; print('gpu_state', gpu_state())"
nvidia-smi --query-gpu=index,pci.bus_id,clocks.sm --format=csv,noheader
K="row_merge or dependent_launches or merge_split" bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150
echo "tests exit $? at ${SECONDS}s"
for d in 128 256; do
  cfg=$([ $d = 128 ] && echo 32/4/128 || echo 16/2/256)
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $cfg \
    --contexts 4096,32768,131072 --batches 1,8,32 --row-merge \
    --out $OUT/decode_ab_rowmerge_d$d.json > $OUT/logs/ab_d$d.log 2>&1
  echo "ab d$d exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d$d.log | cut -c1-300
done
timeout 80 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 32768 --batches 1,8 --window 128 --row-merge \
  --out $OUT/decode_ab_rowmerge_window.json > $OUT/logs/ab_window.log 2>&1
echo "ab window exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_window.log | cut -c1-300
(cd $OUT && tar czf rowmerge_logs.tgz logs && rm -r logs)
