"""SmolLM2-135M from its GGUF as a plain-torch Llama (fp32), with a hook on post-RoPE K/V.

The GGUF's weights are 4-bit; dequantized once, they are the same in every run, so "these weights
with a full-precision KV cache" is the baseline that KV schemes are compared against.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class LlamaConfig:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    eps: float
    rope_theta: float


def _field(reader, key):
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0] if len(f.data) == 1 else [f.parts[i].tolist()[0] for i in f.data]


def load(path: str):
    """-> (config, state dict of fp32 tensors, tokenizer)."""
    try:
        import gguf
        from gguf.quants import dequantize
    except ImportError as exc:
        raise RuntimeError("aphrodite-int2kv eval needs the `gguf` package: "
                           "pip install 'aphrodite-int2kv[eval]'") from exc
    reader = gguf.GGUFReader(path)
    arch = "llama"
    n_heads = int(_field(reader, f"{arch}.attention.head_count"))
    n_kv = int(_field(reader, f"{arch}.attention.head_count_kv"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    cfg = LlamaConfig(n_layers=int(_field(reader, f"{arch}.block_count")), n_heads=n_heads, n_kv_heads=n_kv,
                      head_dim=hidden // n_heads, hidden=hidden,
                      eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
                      rope_theta=float(_field(reader, f"{arch}.rope.freq_base")))
    sd = {}
    for t in reader.tensors:
        w = torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).float()
        shape = [int(x) for x in reversed(t.shape.tolist())]
        w = w.reshape(shape)
        # llama.cpp stores q/k rows permuted for its RoPE; undo it (rotate-half layout)
        if t.name.endswith("attn_q.weight") or t.name.endswith("attn_k.weight"):
            n = n_heads if "attn_q" in t.name else n_kv
            rows, cols = w.shape
            w = w.reshape(n, rows // n // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
        sd[t.name] = w
    return cfg, sd, _tokenizer(reader)


def _tokenizer(reader):
    """Byte-level BPE from the GGUF's own vocabulary and merges (the `tokenizers` package)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    f = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = reader.fields["tokenizer.ggml.merges"]
    merges = [tuple(bytes(f.parts[i]).decode("utf-8").split(" ", 1)) for i in f.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


@torch.no_grad()
def forward(cfg: LlamaConfig, sd, ids: torch.Tensor, attention, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [T, vocab] for token ids [T] (one sequence, no BOS); only positions `rows` (an index
    tensor) if given, which saves the output head's work on long sequences.

    attention(layer, q, k, v) -> out: q [T, Hq, D], k/v [T, Hkv, D] post-RoPE fp32; causal
    attention is the callee's job (that is where KV schemes differ)."""
    T, D = ids.shape[0], cfg.head_dim
    x = sd["token_embd.weight"][ids]
    pos = torch.arange(T, dtype=torch.float32)
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = torch.outer(pos, inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        h = _rms(x, sd[p + "attn_norm.weight"], cfg.eps)
        q = (h @ sd[p + "attn_q.weight"].T).view(T, cfg.n_heads, D)
        k = (h @ sd[p + "attn_k.weight"].T).view(T, cfg.n_kv_heads, D)
        v = (h @ sd[p + "attn_v.weight"].T).view(T, cfg.n_kv_heads, D)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        a = attention(i, q, k, v).reshape(T, cfg.n_heads * D)
        x = x + a @ sd[p + "attn_output.weight"].T
        h = _rms(x, sd[p + "ffn_norm.weight"], cfg.eps)
        x = x + (torch.nn.functional.silu(h @ sd[p + "ffn_gate.weight"].T) * (h @ sd[p + "ffn_up.weight"].T)) \
            @ sd[p + "ffn_down.weight"].T
    x = _rms(x if rows is None else x[rows], sd["output_norm.weight"], cfg.eps)
    head = sd.get("output.weight", sd["token_embd.weight"])
    return x @ head.T


class Model:
    """SmolLM2-135M (the built-in model) with the harness's forward(ids, attention, rows)."""

    def __init__(self, path: str, device: str = "cpu"):
        self.cfg, sd, self.tok = load(path)
        self.sd = {k: v.to(device) for k, v in sd.items()}

    def forward(self, ids: torch.Tensor, attention, rows: torch.Tensor | None = None) -> torch.Tensor:
        return forward(self.cfg, self.sd, ids, attention, rows)


def harness_model(path: str | None = None, device: str = "cpu"):
    """The model the harness measures: a Hugging Face causal LM directory or GGUF file (`--model`,
    quality/hf_model.py), one the harness knows by name (`--model gemma-3-270m`, fetched on first
    use), or SmolLM2-135M, fetched on first use."""
    from aphrodite_int2kv.quality import assets

    if path:
        from aphrodite_int2kv.quality.hf_model import HFModel

        if path in assets.NAMED_MODELS:
            path = assets.named_model_path(path)
        return HFModel(path, device)

    return Model(assets.model_path(), device)
