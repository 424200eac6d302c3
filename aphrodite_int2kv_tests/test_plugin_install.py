"""The installed plugin as aphrodite sees it: entry point, doctor, pip behaviour, upstream diffs."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from aphrodite_int2kv_tests.conftest import run_python

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_load_general_plugins_calls_register_through_entry_point(engine):
    code = (
        "import aphrodite_int2kv, aphrodite.plugins as p\n"
        "assert aphrodite_int2kv._last_outcomes is None\n"
        "p.load_general_plugins()\n"
        "print('STATES', dict(aphrodite_int2kv._last_outcomes))\n"
    )
    res = run_python(code)
    assert res.returncode == 0, res.stderr[-3000:]
    expected = "applied" if engine < (0, 22, 0) else "upstream"
    assert f"'exl3-gdn-in-proj-qkv': '{expected}'" in res.stdout
    assert f"'lora-device-exl3': '{expected}'" in res.stdout
    assert "aphrodite-int2kv 0.1.0: exl3-gdn-in-proj-qkv=" in res.stdout + res.stderr  # the one log line


def test_allow_list_without_us_means_not_loaded(engine):
    code = ("import aphrodite_int2kv, aphrodite.plugins as p\n"
            "p.load_general_plugins()\nprint('CALLED', aphrodite_int2kv._last_outcomes is not None)\n")
    res = run_python(code, {"APHRODITE_PLUGINS": "someone_else"})
    assert "CALLED False" in res.stdout, res.stderr[-2000:]


def test_register_touches_no_cuda(engine):
    code = ("import torch, aphrodite_int2kv\naphrodite_int2kv.register()\n"
            "print('CUDA_INIT', torch.cuda.is_initialized())\n")
    res = run_python(code)
    assert "CUDA_INIT False" in res.stdout, res.stderr[-2000:]


def test_doctor_reports_per_version(engine):
    exe = shutil.which("aphrodite-int2kv", path=os.path.dirname(sys.executable))
    assert exe, "console script aphrodite-int2kv is not installed in this environment"
    res = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    import aphrodite

    assert f"aphrodite-engine  {aphrodite.__version__}" in res.stdout
    assert "visible as 'int2kv'" in res.stdout
    word = "applied" if engine < (0, 22, 0) else "not needed (upstream)"
    for name in ("exl3-gdn-in-proj-qkv", "lora-device-exl3"):
        line = next(l for l in res.stdout.splitlines() if l.strip().startswith(name))
        assert word in line, line


def test_doctor_shows_and_validates_the_int2_options(engine):
    exe = shutil.which("aphrodite-int2kv", path=os.path.dirname(sys.executable))
    res = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "APHRODITE_INT2KV_RECENT_WINDOW": "64"})
    assert res.returncode == 0 and "recent window=64" in res.stdout, res.stdout[-2000:]
    res = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "APHRODITE_INT2KV_GROUP_SIZE": "48"})
    assert res.returncode == 1 and "INVALID" in res.stdout and "GROUP_SIZE=48" in res.stdout


def test_doctor_fails_when_plugin_is_filtered_out(engine):
    exe = shutil.which("aphrodite-int2kv", path=os.path.dirname(sys.executable))
    res = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "APHRODITE_PLUGINS": "other"})
    assert res.returncode == 1
    assert "does not list 'int2kv'" in res.stdout


def test_pip_install_never_touches_torch_or_engine(engine, tmp_path):
    """A real resolve of the plugin into this environment (which has torch and aphrodite):
    the only thing pip would install is the plugin itself."""
    report = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation",
                          "--report", str(report), "--force-reinstall", str(REPO)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    names = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert names == ["aphrodite-int2kv"], names


PATCHES = sorted((REPO / "upstream_prs").glob("*.patch"))


@pytest.mark.parametrize("patch_file", PATCHES, ids=lambda p: p.name)
def test_upstream_diff_applies_to_0_21_sources_once(engine, patch_file, tmp_path):
    if engine[:2] != (0, 21):
        pytest.skip("the diffs are against the 0.21.0 sources")
    import aphrodite

    site = pathlib.Path(aphrodite.__file__).parent.parent
    text = patch_file.read_text()
    targets = [l.split()[1][2:] for l in text.splitlines() if l.startswith("+++ ")]
    for rel in targets:  # a copy of the real, unpatched 0.21.0 files
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(site / rel, tmp_path / rel)

    def patch(*args):
        return subprocess.run(["patch", *args, "-i", str(patch_file)], cwd=tmp_path,
                              capture_output=True, text=True)

    dry = patch("-p1", "--dry-run", "-N")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert all(f"checking file {rel}" in dry.stdout for rel in targets), dry.stdout
    assert patch("-p1", "-N").returncode == 0
    again = patch("-p1", "--dry-run", "-N")
    assert again.returncode != 0 and "previously applied" in again.stdout, again.stdout


def test_ci_deselects_engine_free_tests_only_for_the_torch_and_triton_they_passed_with():
    """.ci/run sets INT2KV_ENGINE_FREE_PASSED after its first venv: a venv with the same torch and
    Triton deselects the engine-free modules (and says so); other versions, or none set, run them."""
    import triton
    import torch

    def run(value):
        env = {k: v for k, v in os.environ.items() if k != "INT2KV_ENGINE_FREE_PASSED"}
        if value is not None:
            env["INT2KV_ENGINE_FREE_PASSED"] = value
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "aphrodite_int2kv_tests/test_int2_format.py", "-k", "hadamard"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    same = run(f"torch {torch.__version__} triton {triton.__version__}")
    from aphrodite_int2kv_tests.conftest import ENGINE_FREE_MODULES

    assert same.returncode == 5 and f"engine-free tests ({', '.join(ENGINE_FREE_MODULES)}) deselected" in same.stdout
    for value in ("torch 0.0 triton 0.0", None):
        other = run(value)
        assert other.returncode == 0 and " passed" in other.stdout and "engine-free" not in other.stdout
