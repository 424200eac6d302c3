"""Static K offsets for any Hugging Face causal LM: the per-layer, per-KV-head mean of post-RoPE
keys over a text, as the int2 cache's K centering reads them (docs/format.md).

Keys are recorded where transformers hands them to its attention function (after RoPE, before
the grouped-query expansion): a recording function is registered in transformers'
AttentionInterface, accumulates the keys and delegates to SDPA, so the model computes exactly what
it would otherwise. The first `skip` positions of each window (the attention sinks, which the
engine stores uncentered) are left out of the mean.
"""

from __future__ import annotations

import torch

NAME = "int2kv_record_keys"


class KeyStats:
    def __init__(self, skip: int):
        self.skip = skip
        self.sums: dict[int, torch.Tensor] = {}
        self.counts: dict[int, int] = {}

    def add(self, layer: int, key: torch.Tensor) -> None:
        """key [B, Hkv, T, D] post-RoPE."""
        k = key[:, :, self.skip:].double()
        if k.shape[2] == 0:
            return
        s = k.sum(dim=(0, 2))                       # [Hkv, D]
        self.sums[layer] = self.sums.get(layer, 0) + s.cpu()
        self.counts[layer] = self.counts.get(layer, 0) + k.shape[0] * k.shape[2]

    def offsets(self) -> dict[int, torch.Tensor]:
        return {i: (self.sums[i] / self.counts[i]).float() for i in sorted(self.sums)}


def collect(model, windows: list[torch.Tensor], skip: int = 4) -> dict[int, torch.Tensor]:
    """Run `model` on each window of token ids ([T] long tensors) and return {layer index:
    k_offset [Hkv, D]} for every layer that called the attention interface."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    stats = KeyStats(skip)

    def record(module, query, key, value, attention_mask, **kwargs):
        stats.add(int(module.layer_idx), key)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(NAME, record)
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        with torch.no_grad():
            for ids in windows:
                model(input_ids=ids[None].to(model.device), use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    if not stats.sums:
        raise RuntimeError("no attention layer called transformers' attention interface; this model's "
                           "keys cannot be recorded this way")
    return stats.offsets()
