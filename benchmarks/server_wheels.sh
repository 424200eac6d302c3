#!/usr/bin/env bash
# Run here (not on the H200 machine, which has no network): downloads into .whl/ the wheels that
# aphrodite's OpenAI server needs beyond .gpu-bundle/ (uvicorn, prometheus, aiohttp and theirs),
# for the H200 machine's Python 3.12; benchmarks/gpu_setup.sh installs .whl/*.whl there. ~10 MiB.
#   bash benchmarks/server_wheels.sh      (then carry ".whl" with the run)
case "${1:-}" in -h|--help) sed -n "2,5p" "$0"; exit 0;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl \
  uvicorn h11 click httptools uvloop watchfiles anyio idna sniffio \
  prometheus-client prometheus-fastapi-instrumentator \
  aiohttp aiosignal frozenlist multidict yarl propcache aiohappyeyeballs attrs \
  cloudpickle pillow regex tqdm \
  ijson jmespath model-hosting-container-standards
du -sh .whl; ls .whl
