#!/usr/bin/env python3
"""Rows of benchmarks/results/quality_smollm2.json (SmolLM2-135M, Moby-Dick, 4 x 1024 tokens from
token 78,003, CPU): the standard table of `aphrodite-int2kv eval`, the window / K-centering sweep,
and calibrated rotations (files from `aphrodite-int2kv calibrate`).

  python benchmarks/quality_smollm2.py --parts standard,windows,calibrated,engine --calibrated DIR --out FILE
  level modes: --parts engine-std,calibrated-std,windows-std (std range, the engine default) or
  engine-lloyd,calibrated-lloyd,windows-lloyd (Lloyd-Max levels)
Rows already in FILE for the same scheme and text are replaced; others are kept.
State of the Union (the reference protocol's second text): --text sotu --windows 2 --start 48232
"""

import argparse
import json
import os
import sys

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from aphrodite_int2kv.cli.eval import evaluate, print_table  # noqa: E402
from aphrodite_int2kv.quality.schemes import Scheme, engine_default_scheme, standard_schemes  # noqa: E402


def _levels(mode):
    """(name suffix, Scheme kwargs) of a level mode: None (min/max), 'lloyd-max' or 'std-range'."""
    return (f" {mode}" if mode else "",
            {"lloyd_max": mode == "lloyd-max", "std_range": mode == "std-range"})


def window_schemes(mode=None):
    rows = []
    q, kw = _levels(mode)
    for center in (False, True):
        for sink in (0, 4, 64):
            for recent in (0, 32, 128, 256):
                name = f"int2 hadamard G32{q} sink{sink} recent{recent}{' K-center' if center else ''}"
                rows.append(Scheme(name, "int2", group_size=32, sink=sink, recent=recent, center=center, **kw))
    return rows


def calibrated_schemes(d, mode=None):
    k, v = os.path.join(d, "k_rotation.pt"), os.path.join(d, "v_rotation.pt")
    q, kw = _levels(mode)
    out = []
    for center in (False, True):
        for sink, recent in ((0, 0), (4, 128)):
            name = f"int2 calibrated G32{q} sink{sink} recent{recent}{' K-offset' if center else ''}"
            out.append(Scheme(name, "int2", group_size=32, k_rotation=k, v_rotation=v, center=center,
                              sink=sink, recent=recent, **kw))
    return out


def level_engine_schemes(d, mode):
    """What the engine runs with a level mode (recent window 128; the first 4 tokens stored
    uncentered in int2 when an offsets file is given), Hadamard or calibrated rotations."""
    import tempfile

    import torch

    from aphrodite_int2kv.int2.rotation import hadamard, save_rotation_file

    k, v = os.path.join(d, "k_rotation.pt"), os.path.join(d, "v_rotation.pt")
    data = torch.load(k, weights_only=True)["layers"]
    path = os.path.join(tempfile.mkdtemp(), "k_hadamard_offsets.pt")
    save_rotation_file(path, {i: hadamard(e["rotation"].shape[-1]) for i, e in data.items()},
                       {i: {"k_offset": e["k_offset"]} for i, e in data.items()})
    q, kw = _levels(mode)
    first = "engine default" if mode == "std-range" else "engine"
    return [Scheme(f"{first}: int2 hadamard G32{q} recent128", "int2", recent=128, **kw),
            Scheme(f"engine: int2 hadamard G32{q} recent128 static K-offset, first 4 uncentered", "int2",
                   recent=128, k_rotation=path, center=True, center_skip=4, **kw),
            Scheme(f"engine: int2 calibrated G32{q} recent128", "int2", recent=128,
                   k_rotation=k, v_rotation=v, **kw),
            Scheme(f"engine: int2 calibrated G32{q} recent128 K-offset, first 4 uncentered", "int2",
                   recent=128, k_rotation=k, v_rotation=v, center=True, center_skip=4, **kw)]


def engine_schemes(d):
    """What the engine does today without windows: Hadamard rotations plus the calibrated static K
    offsets (a K rotation file with 'k_offset', as the engine loads it), with and without the
    sink/recent windows that are not in the engine yet."""
    import tempfile

    import torch

    from aphrodite_int2kv.int2.rotation import hadamard, save_rotation_file

    data = torch.load(os.path.join(d, "k_rotation.pt"), weights_only=True)["layers"]
    rots = {i: hadamard(e["rotation"].shape[-1]) for i, e in data.items()}
    offs = {i: {"k_offset": e["k_offset"]} for i, e in data.items()}
    path = os.path.join(tempfile.mkdtemp(), "k_hadamard_offsets.pt")
    save_rotation_file(path, rots, offs)
    rows = [Scheme(f"int2 hadamard G32 sink{sink} recent{recent} static K-offset", "int2", group_size=32,
                   k_rotation=path, center=True, sink=sink, recent=recent)
            for sink, recent in ((0, 0), (0, 128), (4, 128))]
    # sinks kept in int2 but not centered (no bf16 sink cache needed)
    rows += [Scheme(f"int2 hadamard G32 sink0 recent{recent} static K-offset, first 4 uncentered", "int2",
                    group_size=32, k_rotation=path, center=True, center_skip=4, recent=recent)
             for recent in (0, 128)]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="standard,windows")
    ap.add_argument("--calibrated", default=None, help="directory with k_rotation.pt / v_rotation.pt")
    ap.add_argument("--out", default="benchmarks/results/quality_smollm2.json")
    ap.add_argument("--text", default="moby-dick")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--start", type=int, default=78003)
    a = ap.parse_args()
    schemes = [Scheme("fp", "fp")]
    parts = a.parts.split(",")
    if "standard" in parts:
        schemes += [s for s in standard_schemes() if s.kind != "fp"]
    if "kivi" in parts:
        schemes += [s for s in standard_schemes() if s.kind == "kivi"]
    if "windows" in parts:
        schemes += window_schemes()
    if "calibrated" in parts:
        schemes += calibrated_schemes(a.calibrated)
    for mode in ("lloyd-max", "std-range"):   # parts windows-lloyd, calibrated-std, engine-std, ...
        tag = mode.split("-")[0]
        if f"windows-{tag}" in parts:
            schemes += window_schemes(mode)
        if f"calibrated-{tag}" in parts:
            schemes += calibrated_schemes(a.calibrated, mode)
        if f"engine-{tag}" in parts:
            schemes += level_engine_schemes(a.calibrated, mode)
    if "engine" in parts:
        schemes += engine_schemes(a.calibrated)
    if "skip" in parts:   # only the uncentered-sink rows
        schemes += [x for x in engine_schemes(a.calibrated) if x.center_skip]
    if "datafree" in parts:   # data-free per-sequence K offsets the engine could recompute from its cache
        schemes += [Scheme(f"int2 hadamard G32 sink0 recent{r} K-mean of first {n} (from int2), first {n} uncentered",
                           "int2", group_size=32, center=True, center_skip=n, center_from_cache=True, recent=r)
                    for n in (16, 32, 64) for r in (128,)]
    if "groups-std" in parts:  # group size with std levels (the engine default for head_dim 256 is G = 64)
        schemes += [Scheme(f"int2 hadamard G{g} std-range sink0 recent{r}", "int2", group_size=g, std_range=True,
                           recent=r) for g in (32, 64) for r in (0, 128)]
    if "datafree2" in parts:  # the same, with the first 4 keys (attention sinks) left out of the mean
        schemes += [Scheme(f"int2 hadamard G32 sink0 recent128 K-mean of keys 4..{n} (from int2), first {n} uncentered",
                           "int2", group_size=32, center=True, center_skip=n, center_from_cache=True,
                           center_mean_from=4, recent=128) for n in (20, 36, 68)]
    if "datafree-std" in parts:   # the same data-free offsets with std levels 
        schemes += [Scheme(f"int2 hadamard G32 std-range sink0 recent128 K-mean of first {n} (from int2), first {n} "
                           f"uncentered", "int2", group_size=32, std_range=True, center=True, center_skip=n,
                           center_from_cache=True, recent=128) for n in (16, 32)]
    if "datafree-g64" in parts:   # the data-free offset at the engine's default G = 64 
        schemes += [Scheme(f"int2 hadamard G64 std-range sink0 recent128 K-mean of first {n} (from int2), first {n} "
                           f"uncentered", "int2", group_size=64, std_range=True, center=True, center_skip=n,
                           center_from_cache=True, recent=128) for n in (16,)]
    if "default" in parts:   # the engine's defaults (data-free K centering on)
        schemes += [engine_default_scheme()]
    if "calibrated-skip" in parts:
        k, v = os.path.join(a.calibrated, "k_rotation.pt"), os.path.join(a.calibrated, "v_rotation.pt")
        schemes += [Scheme(f"int2 calibrated G32 sink0 recent{r} K-offset, first 4 uncentered", "int2",
                           group_size=32, k_rotation=k, v_rotation=v, center=True, center_skip=4, recent=r)
                    for r in (0, 128)]
    rows = evaluate(schemes, text=a.text, windows=a.windows, start=a.start)
    print_table(rows)
    old = json.load(open(a.out)) if os.path.exists(a.out) else []
    done = {(r["scheme"], r["text"]) for r in rows}
    json.dump([r for r in old if (r["scheme"], r["text"]) not in done] + rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
