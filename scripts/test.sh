#!/usr/bin/env bash
# Sets everything up, then runs lint, type checks and the whole CPU test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m ruff check fusionlab tests
python3 -m mypy fusionlab
# pytest exits 5 when it collects no tests: set -e turns that into a failure too.
python3 -m pytest "$@"
