#!/usr/bin/env bash
# One host with one or several NVIDIA GPUs: creates a venv, installs this checkout with CUDA 12
# JAX, and runs `fedjax-het ARGS...`. Every round's cohort is sharded over all visible GPUs
# (config.client_devices=0, the default); CUDA_VISIBLE_DEVICES picks which GPUs are visible.
#
# Needs: an NVIDIA driver recent enough for CUDA 12 (pip's jax[cuda12] brings the CUDA
#   libraries), python3 >= 3.10 with venv, network access to PyPI for the first install.
# Usage (from anywhere in the checkout):
#   ./tpu_scripts/run_multi_gpu.sh --workdir runs/demo --config.clients_per_round=16
#   CUDA_VISIBLE_DEVICES=0,1 ./tpu_scripts/run_multi_gpu.sh --config experiments/fiarse/table1.py \
#       --config.data_dir=~/tensorflow_datasets --workdir runs/table1
#   ./tpu_scripts/run_multi_gpu.sh bench --workload W-PFL --cohort 48
# Env:
#   VENV          the venv (default: .venv in the checkout); created when missing.
#   PYTHON        the python that creates it (default: python3).
#   SKIP_INSTALL  1: use the venv as it is (no pip install).
# A clients_per_round that is a multiple of the number of visible GPUs uses them all
# (otherwise the largest number of GPUs that divides it; tpu_scripts/README.md).
set -euo pipefail
repo_root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$repo_root/.venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then
  "$venv/bin/python" -m pip install -q -U pip
  "$venv/bin/python" -m pip install -q -e "$repo_root" 'jax[cuda12]'
fi
# What JAX sees (a CPU here means the CUDA install or driver is not working).
"$venv/bin/python" -c 'import jax; print(f"JAX {jax.__version__}: {jax.device_count()} {jax.default_backend()} device(s): {jax.devices()}")'
exec "$venv/bin/fedjax-het" "$@"
