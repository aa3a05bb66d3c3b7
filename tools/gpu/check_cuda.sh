#!/usr/bin/env bash
# The prepared check of the CUDA device on a lent NVIDIA GPU (H100/H200: CUDA 13 driver, NVRTC and PyTorch in the
# image's python3, no network). Run from anywhere in a copy of the repo:
#     bash tools/gpu/check_cuda.sh          # logs into $OUT (the device tool's folder), else ./gpu-logs
# Our packages are used from packages/*/src through PYTHONPATH, registered by tools/gpu/install_site.py (no pip,
# no hatchling needed). Parts, each under its own `timeout` (535 s in all when every part runs to its limit):
#   env     nvidia-smi, python, torch, the driver and NVRTC found               env.log
#   smoke   tools/gpu/smoke_cuda.py: hand-written kernels, copies, hang, faults, smoke.log
#           dynamic shared memory over 48 KiB, CUDA graph replay vs batched launches, vector loads, a jit
#   unit    packages/cuda-runtime/tests (the fake driver, NVRTC of the image)   unit.log
#   tensor  packages/tensor/tests with DEV=CUDA                                  tensor.log
#   train   50 training steps of the tiny Llama on CUDA                          train.log
#   bench   tools/bench/bench_cuda.py against PyTorch on the same GPU           bench.log
# summary.txt: each part's exit status (124: it ran out of time) and seconds.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
START=$(date +%s)

part() {  # part NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, record the exit status
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" >>"$OUT/$name.log"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0))s" | tee -a "$SUMMARY"
  tail -n 5 "$OUT/$name.log"
}

# the driver: the loader's libcuda.so.1, else the usual driver folders
if ! "$PY" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
  for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    if [ -e "$dir/libcuda.so.1" ]; then export CUDA_DRIVER_PATH=$dir/libcuda.so.1; break; fi
  done
fi

SITE=$(mktemp -d /tmp/ember-site.XXXX)
if ! EMBER_PATH=$("$PY" tools/gpu/install_site.py "$SITE"); then
  echo "install rc=1 (tools/gpu/install_site.py failed)" | tee -a "$SUMMARY"
  exit 1
fi
export PYTHONPATH=$EMBER_PATH${PYTHONPATH:+:$PYTHONPATH}

part env 30 bash -c '
  nvidia-smi; echo; "$0" --version; "$0" -m pip list 2>/dev/null | grep -i -E "^(torch|numpy|pytest|nvidia-cuda-nvrtc|hypothesis) "
  echo "CUDA_DRIVER_PATH=${CUDA_DRIVER_PATH:-}"; ls /usr/local/cuda/lib64/libnvrtc* 2>/dev/null
  "$0" -c "
try:
    import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))
except Exception as e:
    print(\"torch on the GPU:\", type(e).__name__, e)
from ember.runtime import Device
from ember.cuda_runtime import load_nvrtc
dev = Device[\"CUDA\"]; ctx = dev.context
print(\"ember:\", ctx.name, ctx.arch, ctx.multiprocessors, \"SMs\", ctx.total_memory >> 20, \"MiB, driver\", ctx.driver.version, ctx.driver.path)
nv = load_nvrtc(ctx.driver.version[0]); print(\"NVRTC\", nv.version, nv.path, \"flags\", dev.compiler.flags)
print(\"devices:\", Device.registered())
"' "$PY"

part smoke 100 "$PY" tools/gpu/smoke_cuda.py --device CUDA

part unit 40 "$PY" -m pytest packages/cuda-runtime/tests -q -p no:cacheprovider

# the tensor tests on the GPU, in 4 processes when pytest-xdist is there; a test stuck past 60 s fails alone
XDIST=""
if "$PY" -c "import xdist" 2>/dev/null; then XDIST="-n 4"; fi
PER_TEST=""
if "$PY" -c "import pytest_timeout" 2>/dev/null; then PER_TEST="--timeout=60"; fi
# shellcheck disable=SC2086
part tensor 165 env DEV=CUDA "$PY" -m pytest packages/tensor/tests -q -p no:cacheprovider $XDIST $PER_TEST

# 50 optimizer steps (200 samples of batch 4), evaluated at 25 and 50; DEV too: with --device alone the trainer
# mixes devices ("tensors are on different devices: CUDA and CPU", seen with CPU:1 as well)
part train 100 env DEV=CUDA "$PY" -m ember.mlperf_llama train --device CUDA --preset tiny --batch-size 4 --train-samples 200 \
  --eval-every 100 --eval-samples 8 --no-progress --peak-flops 989e12 --cache-dir /tmp/ember-llama-cache

part bench 100 "$PY" tools/bench/bench_cuda.py --reps 5 --device CUDA

echo "total $(($(date +%s) - START))s" | tee -a "$SUMMARY"
