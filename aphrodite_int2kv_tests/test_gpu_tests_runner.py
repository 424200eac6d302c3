"""benchmarks/gpu_tests.py, the GPU test entry point, on a suite made for it: its exit status is 0
only when every collected test passed (declared GPU-irrelevant skips aside), and a shard that
fails, times out or dies fails the run. No GPU needed: the runner is plain pytest plumbing."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

RUNNER = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_tests.py"

SUITE = '''
import os, time, pytest
def test_a(): pass
@pytest.mark.parametrize("x", [1, 2])
def test_b(x): pass
class TestC:
    def test_d(self): pass
def test_skip_gpu(): pytest.skip("needs a CUDA GPU")
def test_slow():
    if os.environ.get("SLOW"): time.sleep(120)
def test_crash():
    if os.environ.get("CRASH"): os._exit(3)
def test_fail():
    assert not os.environ.get("FAIL")
'''


@pytest.mark.parametrize("env,extra,ok", [
    ({}, ["--allow-skip", "CUDA GPU"], True),
    ({}, [], False),                                     # an undeclared skip is not a pass
    ({"FAIL": "1"}, ["--allow-skip", "CUDA GPU"], False),
    ({"SLOW": "1"}, ["--allow-skip", "CUDA GPU", "--timeout", "20"], False),   # a shard past its limit
    ({"CRASH": "1"}, ["--allow-skip", "CUDA GPU"], False),                   # a shard that dies
])
def test_exit_status_means_every_collected_test_passed(tmp_path, env, extra, ok):
    (tmp_path / "test_suite.py").write_text(SUITE)
    import os

    res = subprocess.run([sys.executable, str(RUNNER), "--out", str(tmp_path / "out"), "--shards", "3",
                          "test_suite.py", *extra], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=600)
    record = json.loads((tmp_path / "out" / "gpu_tests_record.json").read_text())
    assert (res.returncode == 0) == ok == record["ok"], res.stdout + res.stderr[-2000:]
    assert record["collected"] == 8 and {"torch", "triton", "aphrodite", "gpu", "commit"} <= set(record["env"])
    if ok:
        assert record["passed"] == 7 and record["skips"] == [
            {"test": "test_suite.py::test_skip_gpu", "reason": "needs a CUDA GPU", "declared": True}]
    if "SLOW" in env or "CRASH" in env:
        assert record["not_run"] > 0 and any(s["problem"] for s in record["shards"])


def test_collecting_nothing_fails(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    res = subprocess.run([sys.executable, str(RUNNER), "--out", str(tmp_path / "out"), "-k", "no_such_test",
                          "test_suite.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "0 tests collected" in res.stdout


def test_each_own_shard_text_gets_a_shard_of_its_own(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    res = subprocess.run([sys.executable, str(RUNNER), "--out", str(tmp_path / "out"), "--shards", "2",
                          "--allow-skip", "CUDA GPU", "--own-shard", "test_b", "--own-shard", "test_slow",
                          "test_suite.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    record = json.loads((tmp_path / "out" / "gpu_tests_record.json").read_text())
    assert res.returncode == 0 and record["passed"] == 7, res.stdout + res.stderr[-2000:]
    # 5 other tests over 2 shards, then [test_b[1], test_b[2]] and [test_slow]
    assert [s["tests"] for s in record["shards"]] == [3, 2, 2, 1]
