#!/usr/bin/env bash
# The speed benchmarks on an accelerator, in under 8 minutes.
#
#   bash benchmarks/device.sh [gpu|tpu]     (default gpu)
#
# Runs benchmarks/speedup.py (both workloads, 3 seeds, no O2: one device has
# no peer to combine with), benchmarks/less_bn.py and benchmarks/grad_freeze.py
# (one seed each) on the accelerator, with cold compiles (no persistent cache),
# and writes benchmarks/results/{speedup,less_bn,grad_freeze}_<device>.json.
# It needs a Python whose JAX sees the accelerator (e.g. `pip install -e .
# "jax[cuda12]"` and the examples extra); set PYTHON to choose it. Each run
# has its own time limit, so one slow benchmark cannot eat the others' time.
set -euo pipefail
cd "$(dirname "$0")/.."
device="${1:-gpu}"
python="${PYTHON:-python3}"
out=benchmarks/results
export PYTHONUNBUFFERED=1
"$python" -c "import jax; print('devices:', jax.devices('$device'))"
start=$SECONDS
timeout 270 "$python" benchmarks/speedup.py --device "$device" --seeds 3 \
  --o2-workloads --no-compilation-cache --out "$out/speedup_$device.json"
timeout 90 "$python" benchmarks/less_bn.py --device "$device" --seeds 1 \
  --no-compilation-cache --out "$out/less_bn_$device.json"
timeout 90 "$python" benchmarks/grad_freeze.py --device "$device" --seeds 1 \
  --no-compilation-cache --out "$out/grad_freeze_$device.json"
echo "device benchmarks done in $((SECONDS - start)) s"
