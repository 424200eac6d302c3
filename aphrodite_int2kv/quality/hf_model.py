"""Any Hugging Face causal LM in the quality harness: `aphrodite-int2kv longctx --model DIR` and
`eval --model DIR` measure a user's own model with each KV scheme before it is served.

transformers runs the model; every attention layer goes through the harness's attention
(`schemes.attention_fn`: the scheme's quantized K/V far from the window, full precision inside
it), registered as a transformers attention implementation. The model's own weights, RoPE and
norms are untouched: only what attention reads from the cache changes, as in the engine.
Layers with a sliding window (Gemma 2/3, gpt-oss, Mistral-style local attention) attend over
their window as the engine keeps them: in the model dtype (full precision here), or in fp8 e4m3
when the attention carries `local_kv_dtype = "fp8"` (APHRODITE_INT2KV_LOCAL_KV_DTYPE=fp8); the
scheme applies to the global layers only. Refused with a clear message: logit soft-capping, and
global layers whose query scale is not head_dim**-0.5. A model is a directory or a GGUF file (transformers reads it).
"""

from __future__ import annotations

import dataclasses
import os

import torch

IMPLEMENTATION = "aphrodite_int2kv_harness"
_current = {"attention": None, "local_kv_dtype": "auto"}


@dataclasses.dataclass
class Shapes:
    """What KVTransform needs of a model (the SmolLM2 loader's LlamaConfig has the same fields)."""
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int


class HarnessTokenizer:
    """A transformers tokenizer behind the `tokenizers` interface the harness uses
    (encode(text).ids, decode(ids))."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text: str):
        return type("Encoding", (), {"ids": self.tok(text, add_special_tokens=False)["input_ids"]})()

    def decode(self, ids) -> str:
        return self.tok.decode(ids)


def _harness_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention interface: query [B, Hq, T, D], key / value [B, Hkv, T, D] post-RoPE
    -> ([B, T, Hq, D], None)."""
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("aphrodite-int2kv harness: attention logit soft-capping is not supported")
    if query.shape[0] != 1:
        raise ValueError("aphrodite-int2kv harness: one sequence at a time")
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if window:
        if _current["local_kv_dtype"] == "fp8":
            key, value = engine_fp8(key), engine_fp8(value)
        return local_attention(query, key, value, window, scaling), None
    attn, sm_scale = _current["attention"]
    if scaling is not None and abs(scaling - sm_scale) > 1e-6 * sm_scale:
        raise NotImplementedError(f"aphrodite-int2kv harness: layer scale {scaling} is not head_dim**-0.5 "
                                  f"({sm_scale}); models with another query scale are not supported yet")
    out = attn(module.layer_idx, query[0].transpose(0, 1).float(), key[0].transpose(0, 1).float(),
               value[0].transpose(0, 1).float())
    return out[None].to(query.dtype), None


def engine_fp8(x: torch.Tensor) -> torch.Tensor:
    """K or V as the engine's fp8 cache holds them (kv_cache_dtype fp8, its default scale of 1):
    rounded to e4m3, saturating at +-448."""
    return x.float().clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(x.dtype)


def local_attention(query, key, value, window: int, scaling: float | None, block: int = 512):
    """A sliding-window layer in full precision: query position t attends to keys t - window + 1 .. t
    (transformers' sliding-window mask), `block` queries at a time against their keys only.
    [1, Hq, T, D] x [1, Hkv, T, D] -> [1, T, Hq, D]."""
    T, D = query.shape[2], query.shape[3]
    group = query.shape[1] // key.shape[1]
    q = query[0].float()
    k = key[0].float().repeat_interleave(group, 0)
    v = value[0].float().repeat_interleave(group, 0)
    scale = D ** -0.5 if scaling is None else scaling
    out = torch.empty_like(q)
    for q0 in range(0, T, block):
        q1 = min(q0 + block, T)
        k0 = max(0, q0 - window + 1)
        dist = torch.arange(q0, q1, device=q.device)[:, None] - torch.arange(k0, q1, device=q.device)[None, :]
        s = (q[:, q0:q1] @ k[:, k0:q1].transpose(1, 2)) * scale
        s = s.masked_fill(~((dist >= 0) & (dist < window)), float("-inf"))
        out[:, q0:q1] = torch.softmax(s, dim=-1) @ v[:, k0:q1]
    return out.transpose(0, 1)[None].to(query.dtype)


def pretrained_location(path: str) -> dict:
    """from_pretrained's arguments for a model directory or a GGUF file (which transformers
    dequantizes; it needs the gguf package)."""
    if path.endswith(".gguf"):
        return dict(pretrained_model_name_or_path=os.path.dirname(os.path.abspath(path)),
                    gguf_file=os.path.basename(path))
    return dict(pretrained_model_name_or_path=path)


class HFModel:
    """A Hugging Face causal LM (a local directory) with the harness's `forward(ids, attention, rows)`."""

    def __init__(self, path: str, device: str = "cpu"):
        try:
            from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise RuntimeError("--model needs transformers: pip install transformers") from exc
        AttentionInterface.register(IMPLEMENTATION, _harness_attention)
        where = pretrained_location(path)
        self.model = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32,
                                                          attn_implementation=IMPLEMENTATION).to(device).eval()
        self.tok = HarnessTokenizer(AutoTokenizer.from_pretrained(**where))
        self.local_layers = sum(1 for m in self.model.modules()       # attention modules with a window
                                if hasattr(m, "layer_idx") and getattr(m, "sliding_window", None))
        c = self.model.config.get_text_config()
        heads = c.num_attention_heads
        self.cfg = Shapes(n_layers=c.num_hidden_layers, n_heads=heads,
                          n_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                          head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, attention, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [T or len(rows), vocab] with `attention(layer, q, k, v)` in every layer."""
        _current["attention"] = (attention, self.cfg.head_dim ** -0.5)
        _current["local_kv_dtype"] = getattr(attention, "local_kv_dtype", "auto")
        try:
            keep = {} if rows is None else {"logits_to_keep": rows.to(self.model.device)}
            logits = self.model(input_ids=ids[None].to(self.model.device), use_cache=False, **keep).logits[0]
        finally:
            _current["attention"] = None
            _current["local_kv_dtype"] = "auto"
        return logits.float()
