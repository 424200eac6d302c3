"""The two upstream fixes against the real aphrodite-engine (0.21.0: bug reproduced, then fixed;
0.24.x: left untouched)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.patches import exl3_shard_ids, lora_device

GDN_QKV_PREFIX = "model.layers.0.linear_attn.in_proj_qkv"
EXL3_NAMES = ("suh", "svh", "trellis", "mcg", "mul1")


def _original(fn):
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    return fn


@pytest.fixture
def pristine(engine):
    """Undo any patch of ours for the duration of a test, then put back what was there."""
    from aphrodite.model_executor.layers.quantization.exl3 import Exl3LinearMethod
    import aphrodite.lora.layers.utils  # noqa: F401  (loads every module that binds _get_lora_device)
    import sys

    saved_shard = Exl3LinearMethod.__dict__["_shard_ids_for_layer"]
    raw = saved_shard.__func__ if isinstance(saved_shard, staticmethod) else saved_shard
    orig = _original(raw)
    Exl3LinearMethod._shard_ids_for_layer = (staticmethod(orig) if isinstance(saved_shard, staticmethod)
                                             else orig)
    saved_dev = {m: sys.modules[m]._get_lora_device for m in lora_device.BINDING_MODULES}
    for m in lora_device.BINDING_MODULES:
        sys.modules[m]._get_lora_device = _original(saved_dev[m])
    yield
    Exl3LinearMethod._shard_ids_for_layer = saved_shard
    for m, fn in saved_dev.items():
        sys.modules[m]._get_lora_device = fn


@pytest.fixture
def exl3_cuda_platform(monkeypatch, engine):
    """EXL3's create_weights refuses non-CUDA platforms up front; the code under test (shard ids,
    weight loading, the missing-tensor check) is platform independent, so present the CPU
    platform as CUDA to that one module only."""
    import aphrodite.model_executor.layers.quantization.exl3 as exl3_mod

    real = exl3_mod.current_platform

    class _AsCuda:
        def __getattr__(self, name):
            return getattr(real, name)

        def is_cuda(self):
            return True

    monkeypatch.setattr(exl3_mod, "current_platform", _AsCuda())


def _gdn_qkv_layer():
    """The LoRA-path GDN projection, built the way gdn_linear_attn builds it under LoRA."""
    from aphrodite.model_executor.layers.linear import MergedColumnParallelLinear
    from aphrodite.model_executor.layers.quantization.exl3 import Exl3Config

    quant = Exl3Config(bits=4.0, tensor_storage={GDN_QKV_PREFIX: {"quant_format": "exl3"}})
    key_dim, value_dim = 64, 128
    return MergedColumnParallelLinear(256, [key_dim, key_dim, value_dim], bias=False,
                                      quant_config=quant, prefix=GDN_QKV_PREFIX)


def _load_like_qwen3_5_lora(layer):
    """qwen3_5.load_weights with enable_lora maps checkpoint `...in_proj_qkv.*` to the param of
    the same name with shard id (0, 1, 2) and calls the param's own weight_loader."""
    tensors = {"suh": torch.randn(256), "svh": torch.randn(256),
               "trellis": torch.randint(-2**15, 2**15, (16, 16, 64), dtype=torch.int16),
               "mcg": torch.tensor([0], dtype=torch.int32)}
    params = dict(layer.named_parameters())
    for name, t in tensors.items():
        params[name].weight_loader(params[name], t, (0, 1, 2))


def _requires(engine, at_most=None, at_least=None):
    if at_most and engine > at_most:
        pytest.skip(f"bug present only up to {at_most}")
    if at_least and engine < at_least:
        pytest.skip(f"only from {at_least}")


def test_exl3_bug_reproduced_without_plugin(engine, tp_group, pristine, exl3_cuda_platform):
    _requires(engine, at_most=(0, 21, 99))
    from aphrodite.config import set_current_aphrodite_config

    with set_current_aphrodite_config(tp_group):
        layer = _gdn_qkv_layer()
        assert layer.exl3_shard_ids == [0, 1, 2]
        _load_like_qwen3_5_lora(layer)
        with pytest.raises(ValueError, match=r"Missing EXL3 tensors for .*in_proj_qkv: suh\[0\], suh\[1\], suh\[2\]"):
            layer.quant_method.process_weights_after_loading(layer)


def test_exl3_fixed_with_plugin(engine, tp_group, pristine, exl3_cuda_platform):
    # 0.21-0.23 load the LoRA GDN projection with the tuple shard id; 0.24 reworked that loader
    # (and has the fix): there the untouched-engine test below applies.
    _requires(engine, at_most=(0, 23, 99))
    from aphrodite.config import set_current_aphrodite_config

    out = exl3_shard_ids.apply()
    expected_state = "applied" if engine < (0, 22, 0) else "upstream"
    assert out.state == expected_state, out
    with set_current_aphrodite_config(tp_group):
        layer = _gdn_qkv_layer()
        assert layer.exl3_shard_ids == [(0, 1, 2)]
        _load_like_qwen3_5_lora(layer)
        for name in ("suh", "svh", "trellis"):
            assert set(layer.exl3_shard_ids) <= set(getattr(layer, name).exl3_tensors), name
        if engine < (0, 22, 0):
            # The missing-tensor check now passes; what stops the CPU run is the later move of
            # the tensors to the CUDA device (the GPU test runs that part for real).
            with pytest.raises((AssertionError, RuntimeError)) as err:
                layer.quant_method.process_weights_after_loading(layer)
            assert "Missing EXL3" not in str(err.value)
            assert "CUDA" in str(err.value) or "cuda" in str(err.value)


def test_exl3_other_prefixes_keep_upstream_answers(engine, pristine):
    from aphrodite.model_executor.layers.quantization.exl3 import Exl3LinearMethod

    _requires(engine, at_most=(0, 23, 99))  # staticmethod form
    before = {p: Exl3LinearMethod._shard_ids_for_layer(type("L", (), {"prefix": p})(), sizes)
              for p, sizes in [("x.qkv_proj", [1, 1, 1]), ("x.gate_up_proj", [1, 1]),
                               ("x.in_proj_qkvz", [1, 1, 1, 1]), ("x.o_proj", [1]),
                               ("x.in_proj_qkv", [1]), ("x.other", [1, 1])]}
    exl3_shard_ids.apply()
    after = {p: Exl3LinearMethod._shard_ids_for_layer(type("L", (), {"prefix": p})(), sizes)
             for p, sizes in [("x.qkv_proj", [1, 1, 1]), ("x.gate_up_proj", [1, 1]),
                              ("x.in_proj_qkvz", [1, 1, 1, 1]), ("x.o_proj", [1]),
                              ("x.in_proj_qkv", [1]), ("x.other", [1, 1])]}
    assert before == after


def _exl3_base_layer():
    """A real linear layer carrying EXL3 parameters and no `weight` (what EXL3 create_weights
    leaves behind)."""
    from aphrodite.model_executor.layers.linear import MergedColumnParallelLinear

    layer = MergedColumnParallelLinear(64, [32, 32], bias=False, prefix="model.layers.0.mlp.gate_up_proj")
    del layer.weight
    for name in EXL3_NAMES:
        layer.register_parameter(name, torch.nn.Parameter(torch.empty(0, dtype=torch.uint8),
                                                          requires_grad=False))
    return layer


def test_lora_device_bug_reproduced_without_plugin(engine, tp_group, pristine):
    _requires(engine, at_most=(0, 21, 99))
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.lora.layers import MergedColumnParallelLinearWithLoRA

    with set_current_aphrodite_config(tp_group):
        base = _exl3_base_layer()
        with pytest.raises(ValueError, match=r"Unsupported base layer: MergedColumnParallelLinear\("):
            MergedColumnParallelLinearWithLoRA(base)


def test_lora_device_fixed_with_plugin_in_every_binding(engine, tp_group, pristine, monkeypatch):
    import sys
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.lora.layers import MergedColumnParallelLinearWithLoRA

    out = lora_device.apply()
    assert out.state == ("applied" if engine < (0, 22, 0) else "upstream"), out
    # CPU torch has no CUDA device index; the fix asks torch for it, as upstream's fix does.
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    with set_current_aphrodite_config(tp_group):
        wrapped = MergedColumnParallelLinearWithLoRA(_exl3_base_layer())  # via base_linear's binding
    assert wrapped.device == torch.device("cuda", 0)
    for modname in lora_device.BINDING_MODULES:
        fn = sys.modules[modname]._get_lora_device
        assert fn(_exl3_base_layer()) == torch.device("cuda", 0), modname
        plain = torch.nn.Linear(2, 2)
        assert fn(plain) == plain.weight.device  # other layers keep upstream behaviour
        with pytest.raises(ValueError, match="Unsupported base layer"):
            fn(torch.nn.ReLU())


def test_plugin_leaves_fixed_engine_untouched(engine, pristine):
    _requires(engine, at_least=(0, 22, 0))
    import sys
    from aphrodite.model_executor.layers.quantization.exl3 import Exl3LinearMethod

    before_shard = Exl3LinearMethod.__dict__["_shard_ids_for_layer"]
    before_dev = {m: sys.modules[m]._get_lora_device for m in lora_device.BINDING_MODULES}
    import aphrodite_int2kv

    states = {o.name: o.state for o in aphrodite_int2kv.register()}
    assert states[exl3_shard_ids.NAME] == "upstream" and states[lora_device.NAME] == "upstream"
    assert Exl3LinearMethod.__dict__["_shard_ids_for_layer"] is before_shard
    assert {m: sys.modules[m]._get_lora_device for m in lora_device.BINDING_MODULES} == before_dev
    if engine >= (0, 24, 0):
        assert not isinstance(before_shard, staticmethod)  # the instance-method form


def test_register_is_idempotent(engine, pristine):
    import sys
    import aphrodite_int2kv
    from aphrodite.model_executor.layers.quantization.exl3 import Exl3LinearMethod

    first = aphrodite_int2kv.register()
    objs = (Exl3LinearMethod.__dict__["_shard_ids_for_layer"],
            [sys.modules[m]._get_lora_device for m in lora_device.BINDING_MODULES])
    for _ in range(3):
        again = aphrodite_int2kv.register()
    assert [o.state for o in again] == [o.state for o in first]
    assert Exl3LinearMethod.__dict__["_shard_ids_for_layer"] is objs[0]
    assert [sys.modules[m]._get_lora_device for m in lora_device.BINDING_MODULES] == objs[1]
    fn = objs[1][0]
    depth = 0
    while getattr(fn, "__wrapped__", None) is not None:
        fn, depth = fn.__wrapped__, depth + 1
    assert depth == (1 if engine < (0, 22, 0) else 0)  # never wrapped twice
