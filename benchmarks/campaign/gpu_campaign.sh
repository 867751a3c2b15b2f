#!/usr/bin/env bash
# The GPU campaign on the GPU machine, one or more steps per call (each step under 10 minutes):
#
#     bash benchmarks/campaign/gpu_campaign.sh --plan            # the steps, their expected seconds, budget
#     bash benchmarks/campaign/gpu_campaign.sh setup physics_ant  # install (once per machine), then steps
#
# Installs the wheels carried in .wheels/ (made here by benchmarks/campaign/gpu_wheels.sh) without any
# index, and this package itself without its dependencies (the image's JAX is kept: the setup
# step checks it against pyproject.toml and records it), then runs the steps with
# `python -m benchmarks.campaign`, each stopped where the call's CAMPAIGN_LIMIT_S seconds
# (default 560, inside a 600 s command) run out, so that what was measured still comes back.
# With $OUT set (the device's output folder, which returns few files) the results are packed
# into $OUT/campaign.tar.gz when the call ends; else they go to $CAMPAIGN_OUT or
# benchmarks/results/gpu-campaign. A step whose JSON is already in benchmarks/results/gpu-campaign
# (copied back and committed) is skipped, so the campaign resumes.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
DONE=benchmarks/results/gpu-campaign
LIMIT=${CAMPAIGN_LIMIT_S:-560}  # gpu.py's CALL_LIMIT_S
MIN_STEP=${CAMPAIGN_MIN_STEP_S:-20}  # a step is not started with less time left than this
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "${1:-}" = "--plan" ]; then exec "$PY" -m benchmarks.campaign --plan; fi
if [ -n "${OUT:-}" ]; then
  DEST=$(mktemp -d)
  export CAMPAIGN_STUDY_OUT="$OUT"  # the study's parts: each one of the call's returned files
  trap 'mkdir -p "$OUT" && tar czf "$OUT/campaign.tar.gz" -C "$DEST" . &&
        echo "[campaign] packed into $OUT/campaign.tar.gz"' EXIT
else
  DEST=${CAMPAIGN_OUT:-$DONE}
fi
if ! "$PY" -c "import brax, mujoco.mjx, gymnax" 2>/dev/null; then
  ls .wheels/*.whl >/dev/null 2>&1 || { echo "no .wheels/: run benchmarks/campaign/gpu_wheels.sh here and carry .wheels" >&2; exit 2; }
  "$PY" -m pip install -q --no-deps --no-index --no-compile --no-cache-dir .wheels/*.whl || exit 3
fi
"$PY" -c "import vaco_jax" 2>/dev/null || \
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . || \
  echo "pip install -e . failed: using the checkout through PYTHONPATH" >&2
mkdir -p "$DEST"
for step in "$@"; do
  if [ -f "$DONE/$step.json" ] && [ "$DEST" != "$DONE" ] && [ "${CAMPAIGN_SIZES:-gpu}" = gpu ]; then
    echo "[campaign] $step: done already ($DONE/$step.json), skipped"; continue
  fi
  left=$((LIMIT - SECONDS))
  if [ "$left" -lt "$MIN_STEP" ]; then echo "[campaign] $step: no time left in this call" >&2; exit 5; fi
  timeout -s INT -k 15 "$left" \
    "$PY" -m benchmarks.campaign --step "$step" --out "$DEST" --sizes "${CAMPAIGN_SIZES:-gpu}" \
    2>&1 | tee -a "$DEST/campaign.log" || exit 4
done
