"""Any Hugging Face causal LM in the quality harness: `aphrodite-int2kv longctx --model DIR` and
`eval --model DIR` measure a user's own model with each KV scheme before it is served.

transformers runs the model; every attention layer goes through the harness's attention
(`schemes.attention_fn`: the scheme's quantized K/V far from the window, full precision inside
it), registered as a transformers attention implementation. The model's own weights, RoPE and
norms are untouched: only what attention reads from the cache changes, as in the engine.
Refused with a clear message: layers with a sliding window or logit soft-capping (the harness
attends over the whole causal context with a plain softmax).
"""

from __future__ import annotations

import dataclasses

import torch

IMPLEMENTATION = "aphrodite_int2kv_harness"
_current = {"attention": None}


@dataclasses.dataclass
class Shapes:
    """What KVTransform needs of a model (the SmolLM2 loader's LlamaConfig has the same fields)."""
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int


class _Tokenizer:
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
    if kwargs.get("sliding_window") or getattr(module, "sliding_window", None):
        raise NotImplementedError("aphrodite-int2kv harness: layers with a sliding window are not supported yet "
                                  f"(layer {getattr(module, 'layer_idx', '?')})")
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("aphrodite-int2kv harness: attention logit soft-capping is not supported")
    if query.shape[0] != 1:
        raise ValueError("aphrodite-int2kv harness: one sequence at a time")
    attn, sm_scale = _current["attention"]
    if scaling is not None and abs(scaling - sm_scale) > 1e-6 * sm_scale:
        raise NotImplementedError(f"aphrodite-int2kv harness: layer scale {scaling} is not head_dim**-0.5 "
                                  f"({sm_scale}); models with another query scale are not supported yet")
    out = attn(module.layer_idx, query[0].transpose(0, 1).float(), key[0].transpose(0, 1).float(),
               value[0].transpose(0, 1).float())
    return out[None].to(query.dtype), None


class HFModel:
    """A Hugging Face causal LM (a local directory) with the harness's `forward(ids, attention, rows)`."""

    def __init__(self, path: str, device: str = "cpu"):
        try:
            from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise RuntimeError("--model needs transformers: pip install transformers") from exc
        AttentionInterface.register(IMPLEMENTATION, _harness_attention)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation=IMPLEMENTATION).to(device).eval()
        self.tok = _Tokenizer(AutoTokenizer.from_pretrained(path))
        c = self.model.config.get_text_config()
        heads = c.num_attention_heads
        self.cfg = Shapes(n_layers=c.num_hidden_layers, n_heads=heads,
                          n_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                          head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, attention, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [T or len(rows), vocab] with `attention(layer, q, k, v)` in every layer."""
        _current["attention"] = (attention, self.cfg.head_dim ** -0.5)
        try:
            logits = self.model(input_ids=ids[None].to(self.model.device), use_cache=False).logits[0]
        finally:
            _current["attention"] = None
        return (logits if rows is None else logits[rows]).float()
