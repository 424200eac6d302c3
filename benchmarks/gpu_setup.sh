#!/usr/bin/env bash
# Source this on the GPU machine from the repo root (a .gpu-bundle/ with aphrodite 0.21.0's files
# as aphrodite.tar.xz and its missing runtime wheels in whl/ must travel with the tree): installs
# them and this plugin (with its entry point) into /tmp/site.
case "${1:-}" in -h|--help) sed -n "2,4p" "${BASH_SOURCE[0]}"; return 0 2>/dev/null || exit 0;; esac
SITE=/tmp/site
if [ ! -d "$SITE/aphrodite" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .gpu-bundle/whl/*.whl
  tar xJf .gpu-bundle/aphrodite.tar.xz -C $SITE
fi
# the OpenAI server's packages (benchmarks/server_wheels.sh), unzipped wheels
if [ -f .whl/server-site.tar.xz ]; then
  tar xJf .whl/server-site.tar.xz -C $SITE
fi
# extra wheels the EXL3 path needs (compressed-tensors for aphrodite's quantization registry)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target $SITE .whl/*.whl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target $SITE . 2>&1 | grep -v -e WARNING -e '^ ' || true
export PYTHONPATH=$SITE APHRODITE_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export PATH=$SITE/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton, aphrodite, aphrodite_int2kv; print('torch', torch.__version__, 'triton', triton.__version__, 'aphrodite', aphrodite.__version__, 'plugin', aphrodite_int2kv.__version__)"
