"""Shared fixtures. Engine tests run against the real aphrodite-engine installed in the venv
(CI builds one venv per supported version); nothing of the engine is mocked."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("APHRODITE_TARGET_DEVICE", "cpu")  # 0.24.x: else "Failed to infer device type"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

# Kernels compile for real on a GPU; on a CPU host they run in Triton's interpreter. The switch
# must be set before any kernel module is imported (triton.jit reads it at decoration time).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def engine_version():
    try:
        import aphrodite
    except ImportError:
        return None
    return tuple(int(x) for x in aphrodite.__version__.split(".")[:3])


@pytest.fixture(scope="session")
def engine():
    """The real engine on a CPU host. 0.21.0 ignores APHRODITE_TARGET_DEVICE, so its CPU
    platform is selected explicitly (what a platform plugin would do)."""
    if engine_version() is None:
        pytest.skip("aphrodite-engine is not installed")
    from aphrodite_int2kv.engine.offline import use_cpu_platform

    use_cpu_platform()     # sized as a GPU would size it (see there)
    return engine_version()


@pytest.fixture(scope="session")
def tp_group(engine, tmp_path_factory):
    """A single-process (gloo) tensor-parallel group, as a worker has, so real parallel
    linear layers can be built on CPU."""
    from aphrodite.config import AphroditeConfig, set_current_aphrodite_config
    from aphrodite.distributed import init_distributed_environment, initialize_model_parallel

    init_file = tmp_path_factory.mktemp("dist") / "init"
    config = AphroditeConfig()
    with set_current_aphrodite_config(config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"file://{init_file}", backend="gloo")
        initialize_model_parallel(1, 1)
    return config


# The per-token format (no longer the default), for the tests about it: as options, and as the
# process environment the engine glue reads
TOKENS = {"APHRODITE_INT2KV_FORMAT": "tokens"}


@pytest.fixture
def tokens_format(monkeypatch):
    monkeypatch.setenv("APHRODITE_INT2KV_FORMAT", "tokens")


# What the `engine` fixture does, for fresh interpreters (0.21.0 cannot infer the CPU device).
CPU_PLATFORM = "from aphrodite_int2kv.engine.offline import use_cpu_platform as _cpu\n_cpu()\n"


def run_python(code: str, env_extra: dict | None = None, timeout: int = 300, cpu_platform=False):
    """Run code in a fresh interpreter of this venv (for what must start unpatched)."""
    import subprocess

    env = {**os.environ, **(env_extra or {})}
    if cpu_platform and not torch.cuda.is_available():
        code = CPU_PLATFORM + code
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)


# CI (.ci/run) runs this suite once per supported engine version. The engine-free modules (the
# kernels and the format: torch and Triton only, no engine import) give the same result in every
# venv that has the same torch and Triton, so after the first venv passes .ci/run sets
# INT2KV_ENGINE_FREE_PASSED to that venv's "torch X triton Y"; a later venv with the same pair
# deselects them (and says so), one with another pair runs them again. Unset: everything runs.
ENGINE_FREE_MODULES = ("test_kernels.py", "test_int2_format.py", "test_gpu_targets.py", "test_tile_store.py")


def _torch_triton() -> str:
    import triton

    return f"torch {torch.__version__} triton {triton.__version__}"


def pytest_collection_modifyitems(config, items):
    passed = os.environ.get("INT2KV_ENGINE_FREE_PASSED")
    if not passed or passed != _torch_triton():
        return
    drop = [i for i in items if i.path.name in ENGINE_FREE_MODULES]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i.path.name not in ENGINE_FREE_MODULES]
        config._int2kv_engine_free_note = (
            f"{len(drop)} engine-free tests ({', '.join(ENGINE_FREE_MODULES)}) deselected: they passed in an "
            f"earlier venv with the same {passed} (INT2KV_ENGINE_FREE_PASSED)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    note = getattr(config, "_int2kv_engine_free_note", None)
    if note:
        terminalreporter.write_line(note)
