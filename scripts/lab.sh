#!/usr/bin/env bash
# Sets everything up, then opens JupyterLab on the tour notebook (127.0.0.1, token authentication).
# --headless: execute the tour notebook top to bottom instead (for CI and servers without a browser).
set -euo pipefail
cd "$(dirname "$0")/.."
FUSIONLAB_BROWSER=0 FUSIONLAB_EXTRAS=notebook bash scripts/setup.sh
if [ "${1:-}" = "--headless" ]; then
  exec python3 -m fusionlab.notebooks_run notebooks/00_tour.ipynb
fi
root=()
[ "$(id -u)" = 0 ] && root=(--allow-root)  # the quick start runs as root on a fresh machine
# Loopback only, token authentication (the URL with the token is printed below).
exec python3 -m jupyter lab --ip=127.0.0.1 --no-browser "${root[@]}" notebooks/00_tour.ipynb
