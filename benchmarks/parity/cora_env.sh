#!/usr/bin/env bash
# The scratch interpreter CORA's code (AGI-Labs/continual_rl at f2754bb) runs in, for
# benchmarks/parity/parity_cora.py and benchmarks/speed/bench_cora.py. It installs no CORA
# code (pass the checkout with --cora-repo): a venv with gym==0.25.2 (0.26 breaks CORA's
# wrappers) and dotmap, which reuses the project's .venv packages (torch, nle/minihack,
# procgen2, ale-py, opencv, ...) and this checkout (cl_suites and the benchmarks package)
# through a .pth file. Run `make install` first.
#   bash benchmarks/parity/cora_env.sh            # builds $CORA_VENV (default /tmp/cora/venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
CORA_VENV="${CORA_VENV:-/tmp/cora/venv}"
PROJECT_PY=".venv/bin/python"
test -x "$PROJECT_PY" || { echo "cora_env.sh: $PROJECT_PY is missing; run 'make install' first" >&2; exit 2; }
PY_VERSION=$("$PROJECT_PY" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
test -x "$CORA_VENV/bin/python" || "$(command -v "$PY_VERSION" || command -v python3)" -m venv "$CORA_VENV"
"$CORA_VENV/bin/python" -m pip install --quiet "gym==0.25.2" "dotmap==1.3.30"
SITE=$("$PROJECT_PY" -c 'import site; print(site.getsitepackages()[0])')
VENV_SITE=$("$CORA_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
# the project's packages, then this checkout itself (PYTHONPATH still wins, e.g. a worktree)
printf '%s\n%s\n' "$SITE" "$(pwd)" > "$VENV_SITE/zz_cl_suites_project.pth"
"$CORA_VENV/bin/python" -c 'import gym, dotmap, torch, minihack, cl_suites; assert gym.__version__ == "0.25.2"'
echo "CORA's interpreter: $CORA_VENV/bin/python"
