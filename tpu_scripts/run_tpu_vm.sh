#!/usr/bin/env bash
# Runs `fedjax-het ARGS...` on every worker of a Cloud TPU VM: a single-host TPU VM, or all
# workers of a multi-host slice at once, with --distributed so that jax.distributed.initialize()
# joins them into one JAX program whose devices are all the slice's chips.
#
# Needs: gcloud, logged in, with access to an existing TPU VM $TPU_NAME in $ZONE; git and
#   python3 on this machine. The checkout's committed HEAD is copied (git archive): commit first.
# Usage (from anywhere in the checkout):
#   TPU_NAME=my-v4-8 ZONE=us-central2-b ./tpu_scripts/run_tpu_vm.sh --workdir runs/demo --config.clients_per_round=16
#   TPU_NAME=my-v4-32 ZONE=us-central2-b ./tpu_scripts/run_tpu_vm.sh --config experiments/fiarse/table1.py \
#       --config.data_dir=gs://my-bucket/tfds --workdir runs/table1
#   TPU_NAME=my-v4-8 ZONE=us-central2-b ./tpu_scripts/run_tpu_vm.sh bench --workload W-PFL --cohort 48
# Env:
#   TPU_NAME, ZONE  the TPU VM (required); PROJECT: its gcloud project (optional).
#   MULTI_HOST      1: pass --distributed; 0: never; unset: 1 when the TPU has more than one
#                   worker (its network endpoints in `gcloud compute tpus tpu-vm describe`).
# On every worker, ~/fedjax_het holds the code (replaced on each call; .venv/ and runs/ are kept)
# and ~/fedjax_het/.venv a venv with the package and jax[tpu]; a relative --workdir is under
# ~/fedjax_het. The cohort is sharded over the chips: a clients_per_round that is a multiple of
# their number uses them all (see tpu_scripts/README.md).
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
flags=(--zone "$ZONE")
if [[ -n "${PROJECT:-}" ]]; then
  flags+=(--project "$PROJECT")
fi

if [[ -z "${MULTI_HOST:-}" ]]; then
  workers=$(gcloud compute tpus tpu-vm describe "$TPU_NAME" "${flags[@]}" --format=json |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin).get("networkEndpoints", [])))')
  MULTI_HOST=$(( workers > 1 ? 1 : 0 ))
  echo "run_tpu_vm.sh: $TPU_NAME has $workers worker(s); MULTI_HOST=$MULTI_HOST" >&2
fi
distributed=''
if [[ "$MULTI_HOST" == 1 ]]; then
  if [[ "${1:-}" == bench ]]; then
    echo 'run_tpu_vm.sh: fedjax-het bench runs on one host; use a single-host TPU VM.' >&2
    exit 2
  fi
  distributed=' --distributed'
fi
args=''
if (( $# )); then
  args=$(printf ' %q' "$@")
fi

repo_root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git -C "$repo_root" archive --format=tar.gz -o "$tmp/fedjax_het.tar.gz" HEAD
gcloud compute tpus tpu-vm scp "$tmp/fedjax_het.tar.gz" "$TPU_NAME:fedjax_het.tar.gz" \
  "${flags[@]}" --worker=all
# The same command on every worker, concurrently; multi-host processes wait for each other in
# jax.distributed.initialize().
gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${flags[@]}" --worker=all --command "
  set -e  # (the worker's login shell; no -u: venv activate scripts may read unset variables)
  mkdir -p ~/fedjax_het && cd ~/fedjax_het
  find . -mindepth 1 -maxdepth 1 ! -name .venv ! -name runs -exec rm -rf {} +
  tar -xzf ~/fedjax_het.tar.gz
  if [ ! -x .venv/bin/pip ]; then
    rm -rf .venv
    python3 -m venv .venv || {  # images without ensurepip
      sudo apt-get -qq update && sudo apt-get -qq install -y python3-venv
      rm -rf .venv && python3 -m venv .venv
    }
  fi
  . .venv/bin/activate
  pip install -q -U pip && pip install -q -e . 'jax[tpu]'
  fedjax-het$distributed$args
"
