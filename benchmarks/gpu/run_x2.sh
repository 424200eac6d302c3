#!/usr/bin/env bash
# Two-GPU H200 call (nvidia-h200-x2), repo root, .gpu-bundle/ and .whl/ carried. Session 4:
# 1) int2 with tensor parallel 2 on the tiny dense model, with a K rotation file holding one
#    rotation and one K offset per KV head (centering + window + TP; each rank picks its heads);
# 2) in parallel, one engine per GPU: GPU 0 kernel tests (std-range store) then dense8b 32K
#    throughput / capacity with the new defaults; GPU 1 hybrid27b capacity at 128K, int2 then bf16.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
python3 benchmarks/gpu/make_center_rotation.py /tmp/models/qwen3 /tmp/k_rot.pt
APHRODITE_INT2KV_K_ROTATION=/tmp/k_rot.pt timeout 170 python3 benchmarks/gpu/e2e_int2.py --model /tmp/models/qwen3 \
    --kv int2 --tp 2 --label tp2-int2-center > $OUT/logs/e2e_tp2-int2-center.log 2>&1
echo "tp2 exit $? at ${SECONDS}s"
T=benchmarks/gpu/e2e_throughput.py
( CUDA_VISIBLE_DEVICES=0 timeout 130 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py > $OUT/logs/gpu_kernel_tests.log 2>&1
  echo "kernel tests exit $? at ${SECONDS}s: $(tail -1 $OUT/logs/gpu_kernel_tests.log)"
  CUDA_VISIBLE_DEVICES=0 timeout $((520 - SECONDS)) python3 $T --model-config dense8b --kv int2 --context 32768 \
    --concurrency 11 --out $OUT/e2e_throughput_std.jsonl > $OUT/logs/e2e_dense8b_int2_std.log 2>&1
  echo "dense8b exit $? at ${SECONDS}s" ) &
( for kv in int2 auto; do
    CUDA_VISIBLE_DEVICES=1 timeout 170 python3 $T --model-config hybrid27b --kv $kv --context 131072 --concurrency "" \
      --gpu-mem 0.8 --eager --out $OUT/kv_capacity_hybrid128k.jsonl > $OUT/logs/hyb128k_$kv.log 2>&1
    echo "hybrid27b 128K $kv exit $? at ${SECONDS}s"
  done ) &
wait
grep -h "prefix-cache\|^ROW\|KV cache size\|int2 KV cache active\|Error" $OUT/logs/*.log | cut -c1-240 | head -30
cd $OUT && tar czf logs.tgz logs
