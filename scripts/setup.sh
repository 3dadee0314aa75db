#!/usr/bin/env bash
# Installs everything fusionlab needs on a fresh machine (Python 3.11 + pip; root for apt).
# Usage: source-free; called by scripts/test.sh and scripts/lab.sh.
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

# The CPU build of torch first, so that the project's dependency does not pull a CUDA build.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[${FUSIONLAB_EXTRAS:-test,notebook,browser}]"
