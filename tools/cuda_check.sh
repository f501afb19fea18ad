#!/bin/bash
# The CUDA checks on a GPU machine that reaches no package index (docs/cuda.md): onnxruntime-gpu
# and onnxmem's pure-Python needs from the bundle `python tools/cuda_bundle.py DIR` made, the
# CUDA libraries of the machine's Python (its nvidia-* packages) on LD_LIBRARY_PATH, onnxmem
# from this tree; then the tests marked cuda and, with BENCH=1, the verify-cuda table of
# docs/speed.md (ONLY=a,b limits it to those zoo models and leaves the page as it is).
#
#   tools/cuda_check.sh .gpu                    # tests only
#   BENCH=1 tools/cuda_check.sh .gpu            # and the table, written into docs/speed.md
#   LOGS=/tmp/logs BENCH=1 ONLY=swin_t_legacy,gpt2 tools/cuda_check.sh .gpu
set -o pipefail
BUNDLE=${1:?usage: tools/cuda_check.sh BUNDLE_DIR (made by tools/cuda_bundle.py)}
[ -f "$BUNDLE/ort-gpu.tar.xz" ] || { echo "error: $BUNDLE/ort-gpu.tar.xz not found: make it with python tools/cuda_bundle.py $BUNDLE" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
LOGS=${LOGS:-$(mktemp -d)}
SITE=${SITE:-/tmp/onnxmem-cuda}
T0=$(date +%s)
mkdir -p "$SITE/ort" "$LOGS"
tar -C "$SITE/ort" -xJf "$BUNDLE/ort-gpu.tar.xz" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE/site" "$BUNDLE"/whl/*.whl || exit 1
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
LIBS=$(find "$SP/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$SITE/ort:$SITE/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" || exit 1
echo "set up in $(( $(date +%s) - T0 )) s; logs in $LOGS"
python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py tests/test_verify.py tests/test_optimize.py 2>&1 \
    | tee "$LOGS/pytest.log" | tail -15
status=$?
echo "tests done at $(( $(date +%s) - T0 )) s"
if [ -n "$BENCH" ]; then
    args=(--sections verify-cuda --runs 1 --warm first)
    [ -n "$ONLY" ] && args+=(--only "$ONLY" --no-doc)
    python3 bench/bench_speed.py "${args[@]}" 2>&1 | tee "$LOGS/bench.log" | grep -E '^\||^- ' || status=1
    echo "bench done at $(( $(date +%s) - T0 )) s"
fi
exit $status
