#!/usr/bin/env python3
"""GPU test entry point whose exit status means what it says: every collected test passed.

  python3 benchmarks/gpu_tests.py --out DIR [--shards 4] [--timeout 400] [-k EXPR] [--own-shard TEXT ...]
                                  [--allow-skip TEXT ...] [TESTS ...]

Collects TESTS (default: the kernel tests and the real-engine GPU tests), runs them in parallel
pytest shards (compiling is what takes the time on a GPU machine's cores), each under its own
time limit and with a JUnit report, and writes DIR/gpu_tests_record.json: the commit, the GPU,
torch / triton / aphrodite versions, collected / passed / failed / skipped, every skip with its
reason, and each shard's exit. Exit status 0 only when passed == collected, except for skips whose
reason contains one of the --allow-skip texts (declared GPU-irrelevant, listed in the record); a
shard that times out or dies without its report fails the run, and so does collecting nothing.
APHRODITE_INT2KV_DEVICE_LIMITS=rtx4090 in front plans every launch as that GPU would.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

DEFAULT_TESTS = ["aphrodite_int2kv_tests/test_kernels.py", "aphrodite_int2kv_tests/test_tile_store.py",
                 "aphrodite_int2kv_tests/test_tile_attention.py",
                 "aphrodite_int2kv_tests/test_engine_gpu.py",
                 # register() asks nothing of CUDA, shown where torch has CUDA
                 "aphrodite_int2kv_tests/test_plugin_install.py::test_register_touches_no_cuda"]


def collect(tests, k):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *tests]
    if k:
        cmd += ["-k", k]
    res = subprocess.run(cmd, capture_output=True, text=True)
    ids = [line.strip() for line in res.stdout.splitlines() if "::" in line]
    if res.returncode not in (0, 5):
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-4000:])
        raise SystemExit(f"gpu_tests: collection failed (pytest exit {res.returncode})")
    return ids


def junit_key(node_id: str) -> str:
    """A collected node id as a JUnit report names it: 'dir/test_x.py::Cls::test[p]' ->
    'dir.test_x.Cls::test[p]'."""
    path, *middle, name = node_id.split("::")
    return ".".join([path[:-3].replace("/", "."), *middle]) + "::" + name


def _outcomes(xml_path):
    """JUnit key -> (outcome, message) from a shard's report."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        kind, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                kind, msg = ("failed" if child.tag == "failure" else "error"), (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                kind, msg = "skipped", (child.get("message") or "")[:300]
        key = case.get("classname", "") + "::" + case.get("name", "")
        if kind != "passed" or key not in out:   # a setup error and the call share a test
            out[key] = (kind, msg)
    return out


def run(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    ids = collect(args.tests, args.k)
    print(f"{len(ids)} tests collected", flush=True)
    # e.g. engines: one at a time within a shard of their own, one such shard per --own-shard text
    own = [[t for t in ids if text in t and not any(o in t for o in args.own_shard[:j])]
           for j, text in enumerate(args.own_shard)]
    rest = [t for t in ids if not any(t in group for group in own)]
    shards = [rest[i::args.shards] for i in range(args.shards) if rest[i::args.shards]] + [g for g in own if g]
    procs = []
    t0 = time.time()
    for i, shard in enumerate(shards):
        xml = os.path.join(args.out, f"shard_{i}.xml")
        log = open(os.path.join(args.out, f"shard_{i}.log"), "w")
        if os.path.exists(xml):
            os.remove(xml)
        cmd = ["timeout", str(args.timeout), sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *shard]
        procs.append((i, xml, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
    results, shard_rows = {}, []
    for i, xml, log, p in procs:
        rc = p.wait()
        log.close()
        complete = os.path.exists(xml) and os.path.getsize(xml) > 0
        if complete:
            results.update(_outcomes(xml))
        why = "timed out" if rc == 124 else ("ended without its report" if not complete else "")
        shard_rows.append(dict(shard=i, tests=len(shards[i]), exit=rc, report=complete, problem=why))
        print(f"shard {i}: {len(shards[i])} tests, exit {rc}{' (' + why + ')' if why else ''}", flush=True)
    counts = {k: sum(1 for v in results.values() if v[0] == k) for k in ("passed", "failed", "error", "skipped")}
    by_id = {t: results[junit_key(t)] for t in ids if junit_key(t) in results}
    missing = [t for t in ids if t not in by_id]
    results = by_id
    skips = [dict(test=t, reason=m, declared=any(a in m for a in args.allow_skip))
             for t, (kind, m) in sorted(results.items()) if kind == "skipped"]
    undeclared = [s for s in skips if not s["declared"]]
    ok = (bool(ids) and not missing and counts["failed"] == counts["error"] == 0 and not undeclared
          and counts["passed"] + len(skips) == len(ids) and all(not s["problem"] for s in shard_rows))
    record = dict(ok=ok, collected=len(ids), **counts, not_run=len(missing), skips=skips,
                  failures=[dict(test=t, message=m) for t, (kind, m) in sorted(results.items())
                            if kind in ("failed", "error")],
                  shards=shard_rows, seconds=round(time.time() - t0, 1), tests=args.tests, k=args.k,
                  allow_skip=args.allow_skip, env=environment(),
                  command=" ".join([os.path.relpath(__file__), *sys.argv[1:]]))
    with open(os.path.join(args.out, "gpu_tests_record.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"collected {len(ids)}, passed {counts['passed']}, failed {counts['failed']}, errors {counts['error']}, "
          f"skipped {len(skips)} ({len(undeclared)} not declared GPU-irrelevant), not run {len(missing)}")
    for s in undeclared:
        print(f"  skipped, not declared: {s['test']}: {s['reason']}")
    for t in missing[:10]:
        print(f"  not run (its shard died or timed out): {t}")
    print("GPU tests:", "OK" if ok else "FAILED")
    return 0 if ok else 1


def environment() -> dict:
    def version(mod):
        try:
            return __import__(mod).__version__
        except Exception:
            return "not installed"

    gpu = "none"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip() or "none"
    except (OSError, subprocess.TimeoutExpired):
        pass
    # a copy of the tree whose .git is missing or stale (a GPU machine's) is named by INT2KV_COMMIT
    commit, dirty = os.environ.get("INT2KV_COMMIT", ""), ""
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                   text=True).stdout
        except OSError:
            pass
    return dict(gpu=gpu, torch=version("torch"), triton=version("triton"), aphrodite=version("aphrodite"),
                commit=(commit or "unknown") + (" + uncommitted changes" if dirty.strip() else ""),
                device_limits=os.environ.get("APHRODITE_INT2KV_DEVICE_LIMITS", ""),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", nargs="*", default=DEFAULT_TESTS)
    ap.add_argument("--out", required=True, help="folder for the shards' logs and reports and the record")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=400, help="seconds per shard")
    ap.add_argument("-k", default="", help="pytest -k: a subset")
    ap.add_argument("--own-shard", action="append", default=[],
                    help="tests whose id contains this text run one after another in a shard of their own (engines "
                         "that each size the GPU's free memory); repeatable, one shard per text")
    ap.add_argument("--allow-skip", action="append", default=[],
                    help="a text in the reason of skips that are GPU-irrelevant (repeatable); other skips fail the run")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
