#!/usr/bin/env bash
# Every kernel test with real compilation, in 4 parallel pytest shards (compiling is what takes the
# time on the H200 machine's 16 cores): logs DIR/kernel_tests_shard_*.log. Exit status 1 when any
# shard reports a failure or an error.
#   [K=EXPR] bash benchmarks/gpu_tests.sh DIR [TIMEOUT_S]     (K: pytest -k, a subset)
#   APHRODITE_INT2KV_DEVICE_LIMITS=rtx4090 bash benchmarks/gpu_tests.sh DIR   (launches planned as that GPU)
set -u
case "${1:-}" in ""|-h|--help) sed -n "2,6p" "$0"; exit 0;; esac
dir=$1; limit=${2:-200}
python3 -m pytest -q -p no:cacheprovider --collect-only ${K:+-k "$K"} aphrodite_int2kv_tests/test_kernels.py 2>/dev/null \
  | grep "::" > /tmp/ids; echo "$(wc -l < /tmp/ids) kernel tests"
rm -f /tmp/shard_*; split -n r/4 /tmp/ids /tmp/shard_
for f in /tmp/shard_*; do
  timeout $limit python3 -m pytest -q -p no:cacheprovider $(cat $f) > $dir/kernel_tests_$(basename $f).log 2>&1 &
done
wait; echo "tests done at ${SECONDS}s"; tail -qn1 $dir/kernel_tests_shard_*.log
grep -h "^FAILED\|Error" $dir/kernel_tests_shard_*.log | cut -c1-200 | head -10
! grep -qE "[0-9]+ (failed|errors?)" $dir/kernel_tests_shard_*.log
