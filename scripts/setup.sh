#!/usr/bin/env bash
# Installs everything fusionlab needs on a fresh machine (Python 3.11 + pip; root for apt).
# Usage: source-free; called by scripts/test.sh and scripts/lab.sh.
# FUSIONLAB_TORCH_INDEX: a pip index for torch, e.g. https://download.pytorch.org/whl/cpu for torch's CPU build
# (on Linux, PyPI's torch wheel is a CUDA build: it runs on a CPU too, but brings ~3 GB of CUDA libraries).
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: graphviz (dot) for graphs, chromium for the real-browser test.
need_apt=()
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
if [ "${FUSIONLAB_BROWSER:-1}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "fusionlab setup: please install ${need_apt[*]} (apt-get install ${need_apt[*]})" >&2
  fi
fi

# torch first, so that the project's dependency (torch>=2.11) keeps it rather than pulling the newest CUDA build.
# pip takes torch==2.13.0 from a local wheel where one lies (2.13.0+cpu on the course's machines), else from PyPI.
if ! python3 -c "import torch" 2>/dev/null; then
  torch_index=()
  [ -n "${FUSIONLAB_TORCH_INDEX:-}" ] && torch_index=(--index-url "${FUSIONLAB_TORCH_INDEX}")
  python3 -m pip install -q "torch==2.13.0" ${torch_index[@]+"${torch_index[@]}"}
fi
python3 -m pip install -q -e ".[${FUSIONLAB_EXTRAS:-test,notebook,browser}]"

# Say which torch this is: a CUDA build on a machine with no GPU works, but is ~3 GB more than it needs.
python3 - <<'EOF'
import shutil

import torch

build = "CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build"
print(f"fusionlab setup: torch {torch.__version__} ({build}); GPU: {torch.cuda.is_available()}")
if torch.version.cuda is not None and not torch.cuda.is_available() and shutil.which("nvidia-smi") is None:
    print("fusionlab setup: no GPU here; for torch's smaller CPU build: pip uninstall -y torch, then "
          "FUSIONLAB_TORCH_INDEX=https://download.pytorch.org/whl/cpu bash scripts/setup.sh")
EOF
