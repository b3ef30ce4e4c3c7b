#!/usr/bin/env bash
# The GPU tier on a GPU machine, in parallel groups (the tests are bound by kernel compiles on the CPU, so six
# processes finish in about the time of the longest group), then compute-sanitizer memcheck over the WGMMA
# weight-only path and the demo. Logs go to $OUT/tier (default ./gpu_tier); the summary is printed last.
#   bash .ci/gpu_tier.sh            # everything
#   SANITIZE=0 bash .ci/gpu_tier.sh # skip the sanitizer pass
set -u
LOGS=${OUT:-.}/tier
mkdir -p "$LOGS"
group() {
    local name=$1; shift
    (python3 -m pytest -q -p no:cacheprovider "$@" > "$LOGS/$name.log" 2>&1; echo "rc=$? $*" >> "$LOGS/$name.log") &
}
group wgmma tests/test_weight_only_wgmma_gpu.py
group awq_dense tests/test_awq_gpu.py tests/test_awq_blob_gpu.py tests/test_weight_only_dense.py
group weight_only tests/test_weight_only_gpu.py
group int8 tests/test_int8_scaled_mm_gpu.py tests/test_split_k_gpu.py
group fp8 tests/test_fp8_blockwise_gpu.py
group fp8_more tests/test_fp8_scaled_mm_gpu.py tests/test_fp8_grouped_gpu.py tests/test_fp8_grouped_contiguous_gpu.py
group sm80 tests/test_sm80_gpu.py tests/test_torch_ops_gpu.py tests/test_autograd_gpu.py tests/test_nn_gpu.py tests/test_quantize_gpu.py
group fuzz tests/test_fuzz_gpu.py tests/test_multi_device_gpu.py
wait
if [ "${SANITIZE:-1}" != 0 ]; then
    compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -q -p no:cacheprovider \
        tests/test_weight_only_wgmma_gpu.py -k "awq or default_dispatch or group_parameters" > "$LOGS/sanitizer.log" 2>&1
fi
python3 -m cute_kernels demo > "$LOGS/demo.log" 2>&1
for f in "$LOGS"/*.log; do
    echo "== $(basename "$f")"
    grep -E "passed|failed|error|ERROR SUMMARY|rc=|TOPS" "$f" | tail -3
done
