#!/usr/bin/env bash
# H200 call (nvidia-h200), session 6: A/B of the dense8b 32K C = 11 decode throughput between this
# session's decode kernels (tail kernel, wave-rounded splits) and session 5's decode.py (commit
# 5c0adf9, put first on PYTHONPATH), each with the decode run timed twice (--repeat-long).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs /tmp/oldpkg
cp -r aphrodite_int2kv /tmp/oldpkg/ && git show 5c0adf9:aphrodite_int2kv/kernels/decode.py > /tmp/oldpkg/aphrodite_int2kv/kernels/decode.py
timeout 215 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --repeat-long --out $OUT/e2e_dense8b_int2_new.jsonl > $OUT/logs/e2e_int2_new.log 2>&1
echo "new exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_int2_new.log | cut -c1-500
left=$((420 - SECONDS))
timeout $left env PYTHONPATH=/tmp/oldpkg:$PYTHONPATH python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 \
  --context 32768 --concurrency 11 --repeat-long --out $OUT/e2e_dense8b_int2_old.jsonl > $OUT/logs/e2e_int2_old.log 2>&1
echo "old exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_int2_old.log | cut -c1-500
python3 -c "import sys; sys.path.insert(0, '/tmp/oldpkg'); import aphrodite_int2kv.kernels.decode as d; print(d.__file__, hasattr(d, 'tail_slots'))"
(cd $OUT && tar czf ab_logs.tgz logs && rm -r logs)
