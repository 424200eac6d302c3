"""The GPUs our users own: launch planning from device limits (CPU, no compile), and the
ahead-of-time check that compiles every planned launch for sm_80 / 86 / 89 / 90 / 120 with Triton's
own compiler (kernels/aot.py; a subprocess, since this process interprets the kernels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aphrodite_int2kv.kernels.decode import decode_launch_config, programs_per_sm
from aphrodite_int2kv.kernels.limits import ENV, H200, PRESETS, TARGETS, device_limits, preset
from aphrodite_int2kv.kernels.prefill import PREFILL_LAUNCHES, prefill_launch_config, prefill_shared


def test_the_h200_plans_what_it_always_planned():
    """Occupancy from registers and shared memory gives the H200 the tuned programs per SM at head_dim
    128 and 256 (one wave of the 16-row rows-on-M tile at 128, eight; two waves, 16, of the per-code
    one); at 64 the ten that fit at its 192 registers (16 were planned before the ahead-of-time
    check measured them: 1.6 waves)."""
    assert [programs_per_sm(64, 8, True), programs_per_sm(128, 8, True), programs_per_sm(128, 8, False),
            programs_per_sm(128, 16, True), programs_per_sm(128, 16, False), programs_per_sm(256, 8, True),
            programs_per_sm(256, 16, True)] == [10, 12, 16, 8, 16, 8, 8]
    # the large head tiles: 16 rows at head_dim 64 (237 registers), 32 rows in two warps at 128
    assert [programs_per_sm(64, 16, True), programs_per_sm(128, 32, True)] == [8, 4]
    assert all(prefill_launch_config(D, H200) == PREFILL_LAUNCHES[0] for D in (64, 128, 256))
    assert H200.pdl


@pytest.mark.parametrize("name", TARGETS)
def test_every_plan_fits_its_gpu(name):
    limits = PRESETS[name]
    for D in (64, 128, 256):
        launch = prefill_launch_config(D, limits)
        assert prefill_shared(D, launch, limits) <= limits.smem_per_block
        for batch in (1, 8, 64):
            for fold in (True, False):
                for hkv, ratio in ((4, 8), (1, 24), (2, 32), (1, 48)):
                    cfg = decode_launch_config(batch, hkv, ratio, D, limits=limits, fold=fold)
                    # the split grid is a whole number of waves of what fits on a multiprocessor
                    per_sm = programs_per_sm(D, cfg.block_h, fold, limits, block_n=cfg.block_n)
                    programs = batch * hkv * -(-ratio // cfg.block_h)
                    assert cfg.num_splits * programs <= max(per_sm * limits.num_sms, programs)
    assert limits.pdl == (limits.capability[0] == 9)     # dependent launches only where measured


def test_consumer_parts_take_smaller_prefill_tiles_and_fewer_programs():
    """99 KB of shared memory per block: the H200's 64 x 64 head_dim-256 prefill (160+ KB) cannot
    launch there, and 100 KB per multiprocessor holds fewer split programs than 228 KB."""
    for name in ("rtx3090", "rtx4090", "rtx5090"):
        limits = PRESETS[name]
        assert prefill_launch_config(256, limits) != PREFILL_LAUNCHES[0]
        assert prefill_launch_config(128, limits) == PREFILL_LAUNCHES[0]
        assert programs_per_sm(128, 8, True, limits) < programs_per_sm(128, 8, True, H200)


def test_device_limits_can_be_forced_by_name(monkeypatch):
    monkeypatch.setenv(ENV, "rtx4090")
    assert device_limits(None) == PRESETS["rtx4090"]
    monkeypatch.setenv(ENV, "gtx480")
    with pytest.raises(ValueError, match=ENV):
        device_limits(None)
    monkeypatch.delenv(ENV)
    import torch

    cpu = device_limits(torch.device("cpu"))
    assert not cpu.pdl and cpu.num_sms == H200.num_sms
    assert preset(" RTX5070 ").num_sms == 48


def test_occupancy_rules():
    """Registers are granted per warp in 256s; each block reserves 1 KB of shared memory."""
    assert H200.resident(168, 1, 0) == 12 and H200.resident(127, 1, 0) == 16 and H200.resident(255, 1, 0) == 8
    assert H200.resident(64, 1, 100 * 1024) == 2
    assert PRESETS["rtx4090"].resident(32, 1, 0) == 24          # the part's block limit


def _aot(*args, env_extra=None, code=None, capsys=None):
    """Run the check in a subprocess; with `capsys`, its progress line (launch i of n, on stderr)
    is shown on the terminal as it goes (the full check compiles for minutes)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_extra or {})
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "aphrodite_int2kv.kernels.aot", *args]
    if capsys is None:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    import tempfile

    with tempfile.TemporaryFile("w+") as stdout, \
            subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True) as proc:
        err = []
        for chunk in iter(lambda: proc.stderr.read(100), ""):
            err.append(chunk)
            with capsys.disabled():
                sys.stderr.write(chunk)
                sys.stderr.flush()
        proc.wait(timeout=3000)
        stdout.seek(0)
        out = stdout.read()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "".join(err))


def test_every_planned_launch_compiles_and_fits_on_every_target(tmp_path, capsys):
    """The check itself: every kernel the engine can launch, for all five targets (minutes: its
    progress shows on the terminal)."""
    out = tmp_path / "aot.json"
    res = _aot("--json", str(out), capsys=capsys)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    data = json.loads(out.read_text())
    assert not data["problems"]
    targets = {u["target"] for u in data["usages"]}
    assert targets == set(TARGETS)
    kernels = {u["kernel"] for u in data["usages"]}
    assert {"_int2_store_kernel", "_window_store_kernel", "_sequence_centers_kernel", "_int2_decode_split_kernel",
            "_int2_decode_tail_kernel", "_int2_decode_merge_kernel", "_int2_prefill_kernel"} <= kernels
    assert all(u["shared"] <= u["limit"] and not u["error"] for u in data["usages"])


def test_the_check_fails_when_a_launch_is_too_big():
    """Claim the H200's head_dim-256 prefill fits in 90 KB: the planner then picks it for an
    RTX 4090, and the check must report that it needs more shared memory than the GPU has."""
    code = """
import sys
from aphrodite_int2kv.kernels import aot, prefill
prefill.SHARED[(False, 256)] = (90 * 1024,) * len(prefill.PREFILL_LAUNCHES)
_, problems = aot.check(["rtx4090"], head_dims=(256,), only="prefill", progress=False)
print("\\n".join(problems))
"""
    res = _aot(code=code)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [p for p in res.stdout.splitlines() if p.startswith("rtx4090: _int2_prefill_kernel")]
    assert any("shared memory, the GPU allows" in p for p in lines), res.stdout
    assert any("planned for" in p for p in lines), res.stdout
