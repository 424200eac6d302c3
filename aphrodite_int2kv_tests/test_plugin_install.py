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
    """register() neither initialises CUDA nor asks anything of a device: every torch.cuda call that
    would (lazy init, device count and properties, current / set device) is recorded with the first
    caller outside torch, and none may come from this package; CUDA must not be initialised. (On a
    GPU machine the engine's own modules, which register() imports and every engine process imports
    anyway, ask torch.cuda.device_count() at import -- triton's drivers, torch's inductor, tvm_ffi
    -- which reads the count through NVML without a CUDA context; those are listed, not failed.)
    The control calls the package's device-limits reader and must be caught."""
    code = ("import torch, traceback, aphrodite_int2kv\n"
            "import aphrodite_int2kv.kernels.limits as limits\n"
            "calls = []\n"
            "for name in ('_lazy_init', 'init', 'device_count', 'current_device', 'set_device',\n"
            "             'get_device_properties', 'get_device_capability', 'get_device_name', 'synchronize'):\n"
            "    real = getattr(torch.cuda, name)\n"
            "    def spy(*a, _real=real, _name=name, **k):\n"
            "        frames = [f for f in traceback.extract_stack()[:-1] if '/torch/' not in f.filename]\n"
            "        calls.append((_name, f'{frames[-1].filename}:{frames[-1].lineno}' if frames else '?'))\n"
            "        return _real(*a, **k)\n"
            "    setattr(torch.cuda, name, spy)\n"
            "aphrodite_int2kv.register()\naphrodite_int2kv.register()\n"
            "print('OUR_CUDA_CALLS', sorted({n for n, f in calls if '/aphrodite_int2kv/' in f}))\n"
            "print('CUDA_INIT', torch.cuda.is_initialized())\n"
            "print('CALLERS', *calls, sep='\\n')\n")
    res = run_python(code)
    assert "OUR_CUDA_CALLS []" in res.stdout and "CUDA_INIT False" in res.stdout, res.stdout + res.stderr[-2000:]
    # the spies do see a call of this package that would touch the device
    res = run_python(code.replace("aphrodite_int2kv.register()\naphrodite_int2kv.register()",
                                  "aphrodite_int2kv.register()\ntry:\n    limits._read(0)\nexcept Exception:\n    pass"))
    assert "OUR_CUDA_CALLS ['get_device_properties']" in res.stdout, res.stdout + res.stderr[-2000:]


def test_our_settings_are_known_to_the_engine_and_typos_are_named(engine, caplog):
    """After register(), the engine's environment check accepts every APHRODITE_INT2KV_* setting we
    read, even with --fail-on-environ-validation; a misspelt one is still unknown to the engine, and
    the plugin names the setting it was probably meant to be."""
    import aphrodite_int2kv
    from aphrodite import envs
    from aphrodite_int2kv.engine.options import KNOWN, PREFIX, Int2Options

    aphrodite_int2kv.register()
    before = dict(envs.environment_variables)
    assert {o.name: o.state for o in aphrodite_int2kv.register()}["env-names"] == "applied"
    assert envs.environment_variables == before                         # idempotent
    env = {PREFIX + "RECENT_WINDOW": "64", PREFIX + "FORMAT": "tiles"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        envs.validate_environ(hard_fail=True)                           # no "unknown variable"
        assert envs.environment_variables[PREFIX + "RECENT_WINDOW"]() == "64"
        mp.setenv(PREFIX + "RECENT_WINDW", "64")
        with pytest.raises(ValueError, match="RECENT_WINDW"):
            envs.validate_environ(hard_fail=True)
        with caplog.at_level("WARNING", logger="aphrodite_int2kv"):
            Int2Options.from_env()
    assert "APHRODITE_INT2KV_RECENT_WINDW is not an aphrodite-int2kv setting" in caplog.text
    assert "did you mean APHRODITE_INT2KV_RECENT_WINDOW" in caplog.text
    assert len(KNOWN) == len(set(KNOWN))


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
                         env={**os.environ, "APHRODITE_INT2KV_FORMAT": "tokens", "APHRODITE_INT2KV_GROUP_SIZE": "48"})
    assert res.returncode == 1 and "INVALID" in res.stdout and "GROUP_SIZE=48" in res.stdout


def _bad_rotation_files(tmp_path):
    import torch

    from aphrodite_int2kv.int2.rotation import hadamard

    h = hadamard(64)
    files = {
        "non-square": {"layers": {0: {"rotation": torch.eye(64)[:, :32]}}},
        "not orthogonal": {"layers": {0: {"rotation": 2 * h}}},
        "bare tensor": h,
        "NaN k_offset": {"layers": {0: {"rotation": h, "k_offset": torch.full((2, 64), float("nan"))}}},
        "mis-shaped k_offset": {"layers": {0: {"rotation": h, "k_offset": torch.zeros(2, 32)}}},
    }
    out = {}
    for what, data in files.items():
        path = tmp_path / (what.replace(" ", "_") + ".pt")
        torch.save(data, path)
        out[what] = str(path)
    text = tmp_path / "notes.txt"
    text.write_text("not a rotation")
    out["text file"] = str(text)
    return out


MESSAGES = {"non-square": "shape \\[1, 64, 32\\], expected \\[32, 32\\]", "not orthogonal": "not orthogonal", "bare tensor": "expected \\{'layers'",
            "NaN k_offset": "k_offset must be a finite tensor", "mis-shaped k_offset": "k_offset must be a finite tensor",
            "text file": "cannot be read as a torch.save file"}


def test_bad_rotation_files_stop_start_up_and_doctor(engine, tmp_path):
    """A rotation file that no model could use is refused when the options are read (engine
    start-up), not at the first request, and `doctor` refuses it with the same message."""
    from aphrodite_int2kv.engine.options import Int2Options
    from aphrodite_int2kv.int2.format import Int2ConfigError

    exe = shutil.which("aphrodite-int2kv", path=os.path.dirname(sys.executable))
    files = _bad_rotation_files(tmp_path)
    for what, path in files.items():
        with pytest.raises(Int2ConfigError, match="K_ROTATION.*" + MESSAGES[what]):
            Int2Options.from_env({"APHRODITE_INT2KV_K_ROTATION": path})
    res = subprocess.run([exe, "doctor"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "APHRODITE_INT2KV_V_ROTATION": files["not orthogonal"]})
    assert res.returncode == 1 and "INVALID" in res.stdout and "not orthogonal" in res.stdout, res.stdout[-2000:]


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


def test_a_patch_that_fails_leaves_the_others_and_non_int2_users_working(engine, tmp_path):
    """A patch whose apply() raises (here: the int2 dtype patch, made to fail in a fresh process)
    is recorded as failed and logged; the other patches still apply, and a model with the engine's
    own KV dtype still configures and builds its attention layers."""
    from aphrodite_int2kv.engine.offline import heads_dir

    model = heads_dir(tmp_path, 8, 2, 64, max_positions=4096)
    code = (
        "import aphrodite_int2kv, aphrodite_int2kv.patches.int2_kv_cache as P\n"
        "def broken():\n    raise RuntimeError('simulated engine change')\n"
        "P.apply = broken\n"
        "states = {o.name: o.state for o in aphrodite_int2kv.register()}\n"
        "print('STATES', sorted(states.items()))\n"
        "from aphrodite.engine.arg_utils import EngineArgs\n"
        "from aphrodite.config import set_current_aphrodite_config\n"
        "from aphrodite.model_executor.layers.attention.attention import Attention\n"
        f"cfg = EngineArgs(model={model!r}, max_model_len=1024, skip_tokenizer_init=True).create_engine_config()\n"
        "with set_current_aphrodite_config(cfg):\n"
        "    a = Attention(8, 64, 0.125, num_kv_heads=2, cache_config=cfg.cache_config, prefix='model.layers.0.self_attn.attn')\n"
        "print('BUILT', a.kv_cache_dtype)\n")
    res = run_python(code, cpu_platform=True)
    assert "BUILT auto" in res.stdout, res.stdout + res.stderr[-3000:]
    states = dict(eval(res.stdout.split("STATES ", 1)[1].splitlines()[0]))
    assert states["int2-kv-cache-dtype"] == "failed" and states["env-names"] in ("applied", "upstream")
    word = "applied" if engine < (0, 22, 0) else "upstream"
    assert states["exl3-gdn-in-proj-qkv"] == word and states["lora-device-exl3"] == word
    assert "patch int2-kv-cache-dtype failed: RuntimeError: simulated engine change" in res.stdout + res.stderr
