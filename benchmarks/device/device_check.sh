#!/usr/bin/env bash
# The prepared GPU check (issue 38 item 6): one script, under 8 minutes on a machine with one
# GPU and 16 cores. Prints, with device=cuda:
#   0. the card, torch and JAX, and the GPU-marked tests (skipped where none are marked);
#   1. agent steps/s of MiniHack15, Procgen6 and Atari6 (paper preset, V-trace, policy_lag 1)
#      with 1, 2, 4, 8 and 16 env worker processes (benchmarks/speed/bench_cores.py);
#   2. Procgen6 with its paper network (CORA's residual CNN) on the GPU;
#   3. MEAL: 5 seeds vmapped in one program (ppo-jax) against one seed, and against MEAL's own
#      trainer when MEAL_REPO names a checkout of TTomilin/MEAL at 7d81858 (bench_meal.py);
#      then MEAL's torch learner with its observations on the device against via the host
#      (issue 39: device_observations; bench_meal.py --sides ours-host ours);
#   4. a short CORA-side run end to end: train, kill -9, resume, report (device_e2e.py);
#   5. the cost model's prediction beside the measured rates (cost_model.py);
#   6. double-buffered acting (issue 50 item 2): Atari6 and MiniHack15 with all cores but one as
#      env workers, env_splits 1 against 2, beside the cost model's prediction.
# Usage:  bash benchmarks/device/device_check.sh [--shrink] [--out DIR] [--stages "0 1 2 3 4 5 6"]
#   --shrink: the same stages on the CPU with tiny budgets (CI runs it: tests/project/test_device_check.py)
#   --stages: the stages to run (default all), so a short lease can take them in two calls
# A stage that fails or outruns its time limit is reported and the next one runs; the script
# exits 1 when any stage failed (the last line names them). In two 10-minute calls:
# --stages "0 1 2" (380 s) and --stages "3 4 5 6" (330 s).
# On a lent GPU machine (no package registry there): carry .whl/, which
# benchmarks/device/device_wheels.sh fills, and the script installs it into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/../.."
SHRINK=0
STAGES="0 1 2 3 4 5 6"
OUT_DIR="${OUT:-/tmp/device-check}"
while [ $# -gt 0 ]; do
  case "$1" in
    --shrink) SHRINK=1 ;;
    --out) OUT_DIR="$2"; shift ;;
    --stages) STAGES="$2"; shift ;;
    *) echo "device_check.sh: unknown argument '$1'; use --shrink, --out DIR and/or --stages LIST" >&2
       exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ "$SHRINK" = 0 ] && [ -d .whl ]; then
  if [ ! -f /tmp/site/.installed ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || { echo "device_check.sh: installing .whl/ failed"; exit 1; }
    tar -xJf .whl/site-extra.tar.xz -C /tmp/site
    mkdir -p /tmp/system-libs /tmp/gl && tar -xJf .whl/system-libs.tar.xz -C /tmp/system-libs
    for lib in /tmp/system-libs/*; do  # only what the machine lacks: never shadow its own
      ldconfig -p | grep -q "/$(basename "$lib")\$" || cp "$lib" /tmp/gl/
    done
    echo "system libraries added: $(ls /tmp/gl | tr '\n' ' ')"
    touch /tmp/site/.installed
  fi
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}" LD_LIBRARY_PATH="/tmp/gl:${LD_LIBRARY_PATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
CORES="$(nproc)"
if [ "$SHRINK" = 1 ]; then
  DEVICE=cpu; WORKERS="2"; LAGS="1"; WARM=0; SECS=1; SUITES="minihack atari"; PRESET=small
  MEAL_ARGS=(--seeds 2 --num-envs 4 --updates 1); E2E_STEPS=128; SIDES=(jax-seeds)
  LIMIT=(600 600 600 600 600 600 600); SMOKE_RUNS="procgen-vtrace"; SPLIT_WORKERS=2
else
  DEVICE=cuda; WORKERS="${DC_WORKERS:-1 4 8 $((CORES - 1))}"; WARM=3; SECS=5
  SUITES="${DC_SUITES:-minihack procgen atari}"
  PRESET=paper; LAGS="0 1"
  MEAL_ARGS=(--seeds 5 --num-envs 16 --updates 4); E2E_STEPS=512; SIDES=(jax jax-seeds)
  LIMIT=(120 200 60 90 110 20 110); SMOKE_RUNS=""  # seconds per stage, 0..6; all smoke runs
  SPLIT_WORKERS=$((CORES - 1))
fi
FAILED=()
# stage N TITLE COMMAND...: runs COMMAND when N is among --stages, within LIMIT[N] seconds
stage() {
  local number="$1" title="$2"; shift 2
  case " $STAGES " in *" $number "*) ;; *) return 0 ;; esac
  echo; echo "== $number. $title ($(date -u +%H:%M:%S))"
  # through bash -c, so a stage can be one of the functions below (exported before use)
  timeout --kill-after=10 "${LIMIT[$number]}" bash -c '"$@"' stage "$@"
  local rc=$?
  if [ $rc != 0 ]; then
    FAILED+=("$number")
    echo "-- stage $number failed (exit $rc$([ $rc = 124 ] && echo ": over its ${LIMIT[$number]} s"))"
  fi
}

card() {
  (nvidia-smi -L 2>/dev/null || echo "no nvidia-smi")
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda:', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
  "$PY" -c "import numpy, jax; print('numpy', numpy.__version__, 'jax', jax.__version__, jax.devices())" \
    || echo "jax: not importable"
  # shellcheck disable=SC2086
  "$PY" -m benchmarks.device.device_smoke --device "$DEVICE" --out "$OUT_DIR/smoke" \
    ${SMOKE_RUNS:+--runs $SMOKE_RUNS}
  local smoke=$?
  if [ "$SHRINK" = 0 ]; then
    "$PY" -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/baselines/test_gpu_smoke.py || return 1
  fi
  return $smoke
}
export PY DEVICE SHRINK OUT_DIR SUITES SMOKE_RUNS
export -f card
stage 0 "card, every suite built and stepped, the GPU-marked tests" card

# shellcheck disable=SC2086
stage 1 "agent steps/s by env workers ($DEVICE, $CORES cores)" \
  "$PY" -m benchmarks.speed.bench_cores --suites $SUITES --lags 1 --cores "$CORES" --workers $WORKERS \
  --repeats 1 --warmup "$WARM" --seconds "$SECS" --set "device=\"$DEVICE\"" \
  --preset "$PRESET" --json "$OUT_DIR/cores.json"

# shellcheck disable=SC2086
stage 2 "Procgen6's residual network ($DEVICE)" \
  "$PY" -m benchmarks.speed.bench_cores --suites procgen --lags $LAGS --cores "$CORES" --workers 0 \
  --repeats 1 --warmup "$WARM" --seconds "$SECS" --set "device=\"$DEVICE\"" \
  --set 'network="residual"' --preset "$PRESET" --json "$OUT_DIR/residual.json"

if [ -n "${MEAL_REPO:-}" ]; then SIDES=(meal "${SIDES[@]}"); fi
stage 3 "MEAL: seeds vmapped in one program" \
  "$PY" -m benchmarks.speed.bench_meal --sides "${SIDES[@]}" ${MEAL_REPO:+--meal-repo "$MEAL_REPO"} \
  "${MEAL_ARGS[@]}" --repeats 1
stage 3 "MEAL's torch learner: observations on the device vs via the host ($DEVICE)" \
  "$PY" -m benchmarks.speed.bench_meal --sides ours-host ours --device "$DEVICE" \
  --num-envs "${MEAL_ARGS[3]}" --updates "${MEAL_ARGS[5]}" --repeats 1

stage 4 "end to end: train, kill -9, resume, report ($DEVICE)" \
  "$PY" -m benchmarks.device.device_e2e --device "$DEVICE" --steps-per-task "$E2E_STEPS" --out "$OUT_DIR/e2e"

cost_model() {
  if [ "$SHRINK" = 1 ]; then
    echo "(--shrink measured the small preset: the paper-preset model does not predict it)"
  fi
  if [ ! -f "$OUT_DIR/cores.json" ]; then echo "(no cores.json: stage 1 did not run here)"; return 0; fi
  # shellcheck disable=SC2046
  "$PY" -m benchmarks.speed.cost_model --suites $SUITES --costs benchmarks/results/costs.json \
    --check "$OUT_DIR/cores.json" $([ "$SHRINK" = 0 ] && echo --gpu)
}
export -f cost_model
stage 5 "the cost model beside the measured rates" cost_model

double_buffer() {
  # shellcheck disable=SC2086
  "$PY" -m benchmarks.speed.bench_cores --suites atari minihack --lags 1 --cores "$CORES" \
    --workers "$SPLIT_WORKERS" --splits 1 2 --repeats 1 --warmup "$WARM" --seconds "$SECS" \
    --set "device=\"$DEVICE\"" --preset "$PRESET" --json "$OUT_DIR/splits.json" || return 1
  # shellcheck disable=SC2046
  "$PY" -m benchmarks.speed.cost_model --suites atari minihack --costs benchmarks/results/costs.json \
    --check "$OUT_DIR/splits.json" $([ "$SHRINK" = 0 ] && echo --gpu)
}
export CORES WARM SECS PRESET SPLIT_WORKERS
export -f double_buffer
stage 6 "double-buffered acting: env_splits 1 vs 2 ($DEVICE, $SPLIT_WORKERS env workers)" double_buffer

echo
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "device check done with failed stages: ${FAILED[*]} ($(date -u +%H:%M:%S))"
  exit 1
fi
echo "device check done ($(date -u +%H:%M:%S))"
