#!/usr/bin/env bash
# The speed benchmarks on an accelerator, in under 10 minutes.
#
#   bash benchmarks/device.sh [gpu|tpu]     (default gpu)
#
# In order of importance, each with its own time limit (so one slow
# benchmark cannot eat the others' time):
#   first, the dispatch-bound step overhead: boostax's O0 and O1 against
#      hand-written jitted steps (with and without donation) on a tiny MLP
#      at batch 32 and a small BatchNorm CNN at batch 8, where the host's
#      work per call sets the pace: results/step_overhead_<device>.json;
#   0. mixed precision: interleaved step time and XLA's temporary (peak)
#      memory of each precision policy against float32, on both workloads
#      (static figures only; the training runs are the CPU's):
#      results/precision_<device>.json;
#   1. the budget protocol on the CIFAR-shaped workload (plain Optax, O1, the
#      recipe; 3 seeds, 5 at the full budget; no cold-compile probes: on an
#      H200 they took over a minute, and 3 has the compile waits):
#      results/speedup_budgets_<device>.json and its PNG;
#   2. the budget ablation (the recipe's parts, MindSpore's freezing,
#      LessBN's options), plain's runs reused from 1:
#      results/speedup_budgets_ablation_<device>.json;
#   3. steps to 95% at a constant learning rate and the interleaved step cost
#      of O0/O1 and each algorithm alone (both workloads, 1 seed, no O2: one
#      device has no peer to combine with): results/speedup_<device>.json.
# It needs a Python whose JAX sees the accelerator, with the project's
# dependencies, scikit-learn and matplotlib; set PYTHON to choose it. The
# project runs from this checkout (PYTHONPATH), so nothing is installed; JAX
# does not preallocate, so the cold-compile probes (fresh processes) fit.
set -uo pipefail
cd "$(dirname "$0")/.."
device="${1:-gpu}"
python="${PYTHON:-python3}"
out=benchmarks/results
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import jax; print('jax', jax.__version__, jax.devices('$device'))" || exit 1
start=$SECONDS
timeout 90 "$python" benchmarks/step_overhead.py --device "$device" \
  --cases mlp cnn --repetitions 25 --out "$out/step_overhead_$device.json"
echo "== step overhead done at $((SECONDS - start)) s (rc $?)"
timeout 100 "$python" benchmarks/precision.py --device "$device" \
  --skip-training --out "$out/precision_$device.json"
echo "== precision done at $((SECONDS - start)) s (rc $?)"
timeout 230 "$python" benchmarks/speedup.py --budgets --device "$device" \
  --skip-compilation --out "$out/speedup_budgets_$device.json"
echo "== budgets done at $((SECONDS - start)) s (rc $?)"
timeout 170 "$python" benchmarks/speedup.py --budgets --budget-ablation \
  --device "$device" --reuse-plain "$out/speedup_budgets_$device.json" \
  --out "$out/speedup_budgets_ablation_$device.json"
echo "== budget ablation done at $((SECONDS - start)) s (rc $?)"
left=$((570 - (SECONDS - start)))
if [ "$left" -gt 40 ]; then
  timeout "$left" "$python" benchmarks/speedup.py --device "$device" \
    --seeds 1 --o2-workloads --skip-compilation --no-compilation-cache \
    --out "$out/speedup_$device.json"
  echo "== levels done at $((SECONDS - start)) s (rc $?)"
fi
echo "device benchmarks done in $((SECONDS - start)) s"
