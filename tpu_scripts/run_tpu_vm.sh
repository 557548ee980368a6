#!/usr/bin/env bash
# Installs fedjax_het on every worker of a Cloud TPU VM and runs `fedjax-het "$@"` there.
# Needs: gcloud with access to the TPU named $TPU_NAME in $ZONE; this checkout's files.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
repo_root="$(cd "$(dirname "$0")/.." && pwd)"
archive="$(mktemp -d)/fedjax_het.tar.gz"
git -C "$repo_root" archive --format=tar.gz -o "$archive" HEAD
gcloud compute tpus tpu-vm scp "$archive" "$TPU_NAME":~/fedjax_het.tar.gz --zone "$ZONE" --worker=all
args=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command "
  set -e
  mkdir -p ~/fedjax_het && tar -xzf ~/fedjax_het.tar.gz -C ~/fedjax_het
  cd ~/fedjax_het
  python3 -m venv .venv && . .venv/bin/activate
  pip install -q -U pip && pip install -q -e . 'jax[tpu]'
  fedjax-het$args
"
