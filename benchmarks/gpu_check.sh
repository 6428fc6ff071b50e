#!/usr/bin/env bash
# The CUDA path on one GPU, in under 5 minutes: the demo and the ResNet-18 config on CUDA with
# pin_memory swept, then the CUDA tests. Prints, per trial, whether batches arrived pinned,
# the host's h2d time per batch, the copy bandwidth timed with CUDA events, and the step.
# Run from anywhere: bash benchmarks/gpu_check.sh   (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-results/gpu-check}
mkdir -p "$OUT"

"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this check needs a GPU"
p = torch.cuda.get_device_properties(0)
print(f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} device(s); "
      f"torch {torch.__version__}, CUDA {torch.version.cuda}")
PY

echo "== demo (JPEG decode + augment, 50 ms sleep step) on CUDA, pin_memory swept"
"$PY" -m loadtune sweep configs/demo.yaml --device cuda --out "$OUT/demo-cuda.csv" \
  --set 'sweep={pin_memory: [true], num_workers: [4, 8]}' --repeats 2

echo "== ResNet-18 (forward, backward, SGD; bf16 autocast) on CUDA, pin_memory swept"
"$PY" -m loadtune sweep configs/resnet18.yaml --device cuda --out "$OUT/resnet18-cuda.csv" \
  --set 'sweep={pin_memory: [true], num_workers: [8, 12]}' --batches 20 --repeats 2

echo "== pinned flags, h2d and copy bandwidth"
"$PY" - "$OUT/demo-cuda.csv" "$OUT/resnet18-cuda.csv" <<'PY'
import sys
import pandas as pd
cols = ["trial", "status", "pin_memory", "pinned", "h2d_ms", "h2d_gb_per_s", "step_ms", "wait_ratio", "throughput"]
for path in sys.argv[1:]:
    print(path)
    print(pd.read_csv(path)[cols].to_string(index=False))
PY

echo "== CUDA tests"
"$PY" -m pytest -q tests/test_cuda.py -p no:cacheprovider
