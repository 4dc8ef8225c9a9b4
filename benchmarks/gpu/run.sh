#!/usr/bin/env bash
# The GPU checks of lightning-presets: real short trainings of the presets that need CUDA.
#   bash benchmarks/gpu/run.sh [--only NAME,NAME] [--budget SECONDS] [--cpu-smoke]
# Writes gpu_checks.json and gpu_checks.log under $OUT when set, else under benchmarks/results/gpu/.
# Installs nothing. Optional: a folder of extra pure-Python packages (e.g. lightning, when the machine
# lacks it) at build/gpu-site, or wherever LP_GPU_SITE points, is put on PYTHONPATH after src/.
# Exit code: 0 when a GPU is visible and no check failed (checks skipped for a missing package do not fail the
# run), 1 when a check failed, 2 when no CUDA device is visible (every check skipped: not a pass).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
SITE="${LP_GPU_SITE:-$ROOT/build/gpu-site}"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -d "$SITE" ]; then
  PYTHONPATH="$PYTHONPATH:$SITE"
fi
export PYTHONPATH
echo "run.sh: $("$PYTHON" --version 2>&1) at $PYTHON; PYTHONPATH=$PYTHONPATH"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader || true
fi
exec "$PYTHON" "$ROOT/benchmarks/gpu/gpu_checks.py" "$@"
