#!/usr/bin/env bash
# The prepared GPU check (issue 38 item 6): one script, under 8 minutes on a machine with one
# GPU and 16 cores. Prints, with device=cuda:
#   0. the card, torch and JAX, and the GPU-marked tests (skipped where none are marked);
#   1. agent steps/s of MiniHack15, Procgen6 and Atari6 (paper preset, V-trace, policy_lag 1)
#      with 1, 2, 4, 8 and 16 env worker processes (benchmarks/bench_cores.py);
#   2. Procgen6 with its paper network (CORA's residual CNN) on the GPU;
#   3. MEAL: 5 seeds vmapped in one program (ppo-jax) against one seed, and against MEAL's own
#      trainer when MEAL_REPO names a checkout of TTomilin/MEAL at 7d81858 (bench_meal.py);
#   4. a short CORA-side run end to end: train, kill -9, resume, report (device_e2e.py);
#   5. the cost model's prediction beside the measured rates (cost_model.py).
# Usage:  bash benchmarks/device_check.sh [--shrink] [--out DIR]
#   --shrink: the same stages on the CPU with tiny budgets (CI runs it: tests/test_device_check.py)
# On a lent GPU machine (no package registry there): carry the wheels that
# benchmarks/device_wheels.sh downloads into .whl/ and the script installs them first.
set -euo pipefail
cd "$(dirname "$0")/.."
SHRINK=0
OUT_DIR="${OUT:-/tmp/device-check}"
while [ $# -gt 0 ]; do
  case "$1" in
    --shrink) SHRINK=1 ;;
    --out) OUT_DIR="$2"; shift ;;
    *) echo "device_check.sh: unknown argument '$1'; use --shrink and/or --out DIR" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ "$SHRINK" = 0 ] && [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
CORES="$(nproc)"
if [ "$SHRINK" = 1 ]; then
  DEVICE=cpu; WORKERS="2"; LAGS="1"; WARM=0; SECS=1; SUITES="minihack atari"; PRESET=small
  MEAL_ARGS=(--seeds 2 --num-envs 4 --updates 1); E2E_STEPS=128; SIDES=(jax-seeds)
else
  DEVICE=cuda; WORKERS="1 2 4 8 16"; WARM=4; SECS=8; SUITES="minihack procgen atari"; PRESET=paper
  LAGS="0 1"
  MEAL_ARGS=(--seeds 5 --num-envs 16 --updates 4); E2E_STEPS=512; SIDES=(jax jax-seeds)
fi
stage() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

stage "0. card"
(nvidia-smi -L 2>/dev/null || echo "no nvidia-smi")
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda:', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
"$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" || echo "jax: not importable"
if [ "$SHRINK" = 0 ]; then
  "$PY" -m pytest -q -p no:cacheprovider -m gpu tests || echo "GPU-marked tests failed (above)"
fi

stage "1. agent steps/s by env workers ($DEVICE, $CORES cores)"
# shellcheck disable=SC2086
"$PY" benchmarks/bench_cores.py --suites $SUITES --lags 1 --cores "$CORES" --workers $WORKERS \
  --repeats 1 --warmup "$WARM" --seconds "$SECS" --set "device=\"$DEVICE\"" \
  --preset "$PRESET" --json "$OUT_DIR/cores.json"

stage "2. Procgen6's residual network ($DEVICE)"
# shellcheck disable=SC2086
"$PY" benchmarks/bench_cores.py --suites procgen --lags $LAGS --cores "$CORES" --workers 0 \
  --repeats 1 --warmup "$WARM" --seconds "$SECS" --set "device=\"$DEVICE\"" \
  --set 'network="residual"' --preset "$PRESET" --json "$OUT_DIR/residual.json"

stage "3. MEAL: seeds vmapped in one program"
if [ -n "${MEAL_REPO:-}" ]; then SIDES=(meal "${SIDES[@]}"); fi
"$PY" benchmarks/bench_meal.py --sides "${SIDES[@]}" ${MEAL_REPO:+--meal-repo "$MEAL_REPO"} \
  "${MEAL_ARGS[@]}" --repeats 1

stage "4. end to end: train, kill -9, resume, report ($DEVICE)"
"$PY" benchmarks/device_e2e.py --device "$DEVICE" --steps-per-task "$E2E_STEPS" --out "$OUT_DIR/e2e"

stage "5. the cost model beside the measured rates"
if [ "$SHRINK" = 1 ]; then echo "(--shrink measured the small preset: the paper-preset model does not predict it)"; fi
"$PY" benchmarks/cost_model.py --suites $SUITES --costs benchmarks/results/costs.json \
  --check "$OUT_DIR/cores.json" $([ "$SHRINK" = 0 ] && echo --gpu)
echo; echo "device check done ($(date -u +%H:%M:%S))"
