#!/usr/bin/env bash
# The model zoo at GPU size on one GPU: correctness against eager first, then eager / fusionlab / Inductor.
#   bash benchmarks/models_gpu.sh OUT_DIR [MODES] [MODELS...]
# MODES: inference, training or inference,training (default). Writes OUT_DIR/bench_models_<gpu>.{csv,md}.
# Each model and mode gives two rows: plain (fusionlab vs Inductor) and CUDA graphs (fusionlab cudagraphs=True vs
# Inductor mode="reduce-overhead"), each with host ms and GPU ms of eager / fusionlab / Inductor.
set -uo pipefail
out=${1:-results}
modes=${2:-inference,training}
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
python3 -m fusionlab bench --models --device cuda --modes "$modes" --out "$out" "$@" 2>&1 \
  | grep -v -i -E "warn|^\[transformers\]" | tail -30
