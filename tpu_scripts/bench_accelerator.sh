#!/usr/bin/env bash
# Benchmarks this machine's accelerator with `fedjax-het bench`: W-PFL with cohorts of 50 and 500
# clients, W-FIARSE, W-MLP and W-TAIL (heavy-tailed StackOverflow-shaped sizes, one local epoch:
# its useful_step_fraction says how much of the computed work was padding), one after another,
# then FedJAX's EMNIST reference (experiments/bench/fedjax_reference.py: 1,500 rounds of W-EMNIST,
# total seconds with the compile apart). Each run's output goes to the terminal and to
# $RESULTS.log; its last line (one JSON object: s/round, examples/s, roofline fraction, device
# kind, ...) is appended to $RESULTS.
#
# Needs: fedjax-het on PATH with the accelerator's JAX (e.g. the venv of run_multi_gpu.sh or
#   run_tpu_vm.sh, activated), on one host. On a CPU it runs too, but W-FIARSE (ResNet-18,
#   10 clients x 100 steps per round) takes long there.
# Usage (from anywhere):
#   . .venv/bin/activate && ./tpu_scripts/bench_accelerator.sh
#   RESULTS=results/h100.jsonl ROUNDS=20 ./tpu_scripts/bench_accelerator.sh
# Env:
#   RESULTS         JSON-lines file the results are appended to (default: bench_results.jsonl).
#   ROUNDS          timed rounds per workload, after a compiling warm-up round (default: 10).
#   BACKEND         auto | vmap | map | sequential (default: auto = map, chunks of 128 on GPU/TPU).
#   CLIENT_DEVICES  devices each cohort is sharded over (default: 1, one device). 0 = as many
#                   visible devices as divide the cohort (50, 500, W-FIARSE's 10) evenly.
#   FEDJAX_HET      the command (default: fedjax-het; e.g. 'python3 -m fedjax_het').
#   PYTHON          the Python that runs fedjax_reference.py (default: python3).
#   WORKLOADS       the bench runs, ';'-separated flag lists (default: the five above).
#   REFERENCE       flags of fedjax_reference.py (default: --rounds 1500 --chunk 100); 'skip'
#                   leaves it out. A CPU dry run: REFERENCE='--rounds 2 --chunk 1 --num-clients 50'.
set -euo pipefail
results="${RESULTS:-bench_results.jsonl}"
log="$results.log"
fedjax_het="${FEDJAX_HET:-fedjax-het}"
mkdir -p "$(dirname "$results")"
common="--rounds ${ROUNDS:-10} --backend ${BACKEND:-auto} --client-devices ${CLIENT_DEVICES:-1}"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
python="${PYTHON:-python3}"
IFS=';' read -r -a workloads <<< "${WORKLOADS:---workload W-PFL --cohort 50;--workload W-PFL --cohort 500;--workload W-FIARSE;--workload W-MLP;--workload W-TAIL}"
record() {  # the last line of $tmp, a JSON object, appended to $results
  cat "$tmp" >> "$log"
  last="$(tail -n 1 "$tmp")"
  if [[ "$last" != '{'* ]]; then
    echo "bench_accelerator.sh: no JSON result from: $*" >&2
    exit 1
  fi
  echo "$last" >> "$results"
}
for workload in "${workloads[@]}"; do
  read -r -a flags <<< "$workload $common"
  echo "== $(date -u +%FT%TZ) $fedjax_het bench ${flags[*]}" | tee -a "$log"
  $fedjax_het bench "${flags[@]}" | tee "$tmp"
  record "bench ${flags[*]}"
done
reference="${REFERENCE:---rounds 1500 --chunk 100}"
if [[ "$reference" != skip ]]; then
  read -r -a flags <<< "$reference --backend ${BACKEND:-auto}"
  script="$(dirname "$0")/../experiments/bench/fedjax_reference.py"
  echo "== $(date -u +%FT%TZ) fedjax_reference.py ${flags[*]}" | tee -a "$log"
  "$python" "$script" "${flags[@]}" | tee "$tmp"
  record "fedjax_reference.py ${flags[*]}"
fi
echo "results appended to $results (full output: $log)"
