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
    import aphrodite.platforms as platforms

    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        from aphrodite.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
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


# What the `engine` fixture does, for fresh interpreters (0.21.0 cannot infer the CPU device).
CPU_PLATFORM = (
    "import aphrodite.platforms as _platforms\n"
    "if type(_platforms.current_platform).__name__ == 'UnspecifiedPlatform':\n"
    "    from aphrodite.platforms.cpu import CpuPlatform\n"
    "    _platforms._current_platform = CpuPlatform()\n"
)


def run_python(code: str, env_extra: dict | None = None, timeout: int = 300, cpu_platform=False):
    """Run code in a fresh interpreter of this venv (for what must start unpatched)."""
    import subprocess

    env = {**os.environ, **(env_extra or {})}
    if cpu_platform and not torch.cuda.is_available():
        code = CPU_PLATFORM + code
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)
