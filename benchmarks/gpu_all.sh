#!/usr/bin/env bash
# Everything the GPU machine checks, in one command: the benchmark suite, Triton's asm stages, the test suite.
#   bash benchmarks/gpu_all.sh OUT_DIR
set -uo pipefail
out=${1:-results}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m fusionlab bench --device cuda --out "$out/bench" --quiet 2>&1 | grep -v Warning | tail -16
timeout 60 python3 benchmarks/host_overhead.py "$out/host_overhead.json" gpt_block 2>&1 | grep -v Warning | tail -12
timeout 150 python3 benchmarks/compile_time.py "$out/compile_time.json" gpt_block 2>&1 | grep -v Warning | tail -4
python3 benchmarks/sass_count.py 2>&1 | grep -v -i warn | tee "$out/sass_count.md"
python3 - <<'PY' 2>&1 | tee "$out/asm.txt"
import torch, fusionlab as fl
ex = fl.explore(lambda x: torch.softmax(x, -1), torch.randn(64, 1024, device="cuda"))
ex(torch.randn(64, 1024, device="cuda"))
for kernel in ex.compiled.kernels:
    print(kernel.name, kernel.backends, kernel.config, sorted(kernel.asm))
PY
timeout 420 python3 -m pytest -m "gpu or not gpu" -q -n 8 -p no:cacheprovider \
  tests/test_cases.py tests/test_codegen.py tests/test_fusion.py tests/test_inputs.py tests/test_safety.py \
  tests/test_random_graphs.py tests/test_opinfo.py tests/test_bench.py tests/test_inductor.py tests/test_workloads.py \
  tests/test_devices.py tests/test_timing.py tests/test_suite.py tests/test_cli.py tests/test_matmul.py \
  tests/test_compile_pool.py tests/test_explore_timing.py tests/test_direct_launch.py tests/test_erf.py 2>&1 | tee "$out/pytest.txt" | tail -15
