#!/usr/bin/env bash
# Run here (not on the H200 machine, which has no network): fetches the wheels that aphrodite's
# OpenAI server imports beyond .gpu-bundle/ (uvicorn, prometheus, aiohttp, the tool parsers'
# ijson and mistral_common, ... for the H200 machine's Python 3.12) and packs them, unzipped, into
# .whl/server-site.tar.xz (21 MiB, so that it travels with the 40 MiB bundle within the 64 MiB
# carry); benchmarks/gpu_setup.sh unpacks it into the site it installs.
#   bash benchmarks/server_wheels.sh      (then carry ".whl" with the run)
case "${1:-}" in -h|--help) sed -n "2,7p" "$0"; exit 0;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$tmp/whl" \
  uvicorn h11 click httptools uvloop watchfiles anyio idna sniffio \
  prometheus-client prometheus-fastapi-instrumentator \
  aiohttp aiosignal frozenlist multidict yarl propcache aiohappyeyeballs attrs \
  cloudpickle pillow regex tqdm \
  ijson jmespath model-hosting-container-standards \
  mistral_common jsonschema referencing rpds-py jsonschema-specifications pydantic-extra-types pycountry \
  tiktoken sentencepiece
mkdir -p "$tmp/site"
for w in "$tmp"/whl/*.whl; do (cd "$tmp/site" && python3 -m zipfile -e "$w" .); done
tar cJf .whl/server-site.tar.xz -C "$tmp/site" .
du -sh .whl/server-site.tar.xz
