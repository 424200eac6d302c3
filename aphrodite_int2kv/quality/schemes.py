"""KV schemes compared by `aphrodite-int2kv eval`: ours (through the int2 slot quantizer the store
kernel implements bit for bit) and the baselines users ask about. Each scheme turns post-RoPE K/V
of a whole window into what attention would read back from its cache ("fake quantization").
"""

from __future__ import annotations

import dataclasses

import torch

from aphrodite_int2kv.int2 import tiles
from aphrodite_int2kv.int2.format import SlotLayout
from aphrodite_int2kv.int2.quantizer import decode_slots, encode_slots
from aphrodite_int2kv.int2.reference import query_codes, rotate
from aphrodite_int2kv.int2.rotation import hadamard, load_rotation_file


@dataclasses.dataclass(frozen=True)
class Scheme:
    name: str
    kind: str                    # fp | int2 | naive | kivi | fp8 | int4 | turboquant | int8_pth | fp8_pth | tiles
    group_size: int = 32
    k_rotation: str = "hadamard"  # hadamard | none | a rotation file (int2 and tiles)
    v_rotation: str = "hadamard"
    k_clip: float = 1.0
    v_clip: float = 1.0
    lloyd_max: bool = False
    std_range: bool = False      # uniform levels over mean +- 1.5 * 0.9957 std (the engine default)
    recent: int = 0              # last R tokens of each query's context kept in full precision
    sink: int = 0                # first S tokens kept in full precision
    center: bool = False         # subtract a per-head K offset (mean of the first 32 keys) first
    center_skip: int = 0         # ...except for the first N tokens, stored uncentered in int2
    center_from_cache: bool = False   # data-free offset: mean of the first center_skip keys as int2 reads them back
    center_mean_from: int = 0    # ...leaving the first N of them (attention sinks) out of the mean
    query_codes: bool = False    # int2 keys (but uncentered first ones) scored as decode's folded tile does:
    #                              with the query rounded to int8 in the K-rotated basis (reference.query_codes)
    # turboquant (the engine's own presets, rebuilt from their description, see turboquant_preset):
    k_bits: int = 0              # 8: fp8 e4m3 keys; 3-4: Lloyd-Max codes of the rotated unit key + its norm
    v_bits: int = 0              # uniform codes over each value vector, fp16 scale and zero
    norm_correction: bool = False  # rescale the decoded unit key to norm 1 before un-rotating
    boundary: int = 0            # first and last N layers kept in full precision
    engine_dtype: str = ""       # the engine's --kv-cache-dtype this row stands for (engine_dtype_schemes)
    # tiles (int2/tiles.py): K in channel tiles of `tile` tokens with k_bits, V in per-token groups
    # of group_size with v_bits (std levels) or, with v_tiles, in channel tiles too. A tile is
    # quantized once it has left the recent window whole: until then it is read in full precision.
    tile: int = 32
    norm_balance: bool = True
    v_tiles: bool = False
    meta_bits: int = 16          # channel tiles' scale and zero: fp16, or 8 (e4m3 under an fp16 peak per tile)
    tile_staging: bool = True    # the window also stages the tile being filled (read in full precision until
    #                              it has left the window whole); False: as the engine stores it, every position
    #                              before the last `recent` read from its tile's record

    def bits_per_element(self, head_dim: int, context: int = 32768, layers: int = 0) -> float:
        """Stored bits per K/V element, averaged over K and V, the window and (given `layers`) the
        full-precision boundary layers."""
        base = {"fp": 16.0, "fp8": 8.0,
                "naive": 2 + 32 / head_dim,
                "kivi": 2 + 32 / 32,
                "int4": 4 + 32 / self.group_size,
                "int8_pth": 8 + 32 / head_dim, "fp8_pth": 8 + 32 / head_dim}.get(self.kind)
        if self.kind == "turboquant":   # key: codes + fp16 norm (fp8: none); value: codes + fp16 scale, zero
            key = 8.0 if self.k_bits == 8 else self.k_bits + 16 / head_dim
            base = (key + self.v_bits + 32 / head_dim) / 2
        window = self.recent + self.sink
        if self.kind == "tiles":        # the window may also stage the tile being filled
            key = tiles.channel_tile_bits(self.k_bits, self.tile, head_dim, self.norm_balance, self.meta_bits)
            value = (tiles.channel_tile_bits(self.v_bits, self.tile, head_dim, self.norm_balance, self.meta_bits)
                     if self.v_tiles
                     else tiles.token_group_bits(self.v_bits, self.group_size))
            base, window = (key + value) / 2, window + (self.tile if self.tile_staging else 0)
        if base is None:  # ours: the slot format, padding included
            base = SlotLayout(head_dim, self.group_size).bits_per_element()
        window = min(context, window)
        bits = (base * (context - window) + 16 * window) / context
        if layers and self.boundary:
            full = min(layers, 2 * self.boundary)
            bits = (bits * (layers - full) + 16 * full) / layers
        return bits


def _uniform(x, bits, dim_groups):
    """Asymmetric min/max n-bit fake quantization over the last dim in groups (baselines)."""
    shape = x.shape
    g = x.reshape(*shape[:-1], -1, dim_groups)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    levels = 2 ** bits - 1
    scale = ((hi - lo) / levels).half().float()
    lo = lo.half().float()
    inv = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    c = torch.floor((g - lo) * inv + 0.5).clamp(0, levels)
    return (c * scale + lo).reshape(shape)


def turboquant_preset(name: str) -> Scheme:
    """The engine's `--kv-cache-dtype turboquant_*` presets (aphrodite 0.21.0's TQ_PRESETS and
    store kernels, rebuilt from their description): keys either cast to fp8 e4m3 as they are
    (k8) or divided by their norm, Hadamard-rotated and coded per coordinate with the 2^b
    Lloyd-Max levels of N(0, 1/head_dim), the norm kept in fp16; values coded uniformly over each
    head vector (min/max, fp16 scale and zero), not rotated; the first and last 2 layers in full
    precision (the engine's boundary protection)."""
    k_bits, v_bits, nc = {"turboquant_k8v4": (8, 4, False), "turboquant_4bit_nc": (4, 4, True),
                          "turboquant_k3v4_nc": (3, 4, True), "turboquant_3bit_nc": (3, 3, True)}[name]
    return Scheme(f"{name} (engine preset, rebuilt)", "turboquant", k_bits=k_bits, v_bits=v_bits,
                  norm_correction=nc, boundary=2)


def gaussian_lloyd_max(bits: int, sigma: float, iters: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    """Levels and decision boundaries of the 2^bits-level minimum-MSE quantizer of N(0, sigma^2):
    Lloyd's iteration with each level at its cell's conditional mean (closed form)."""
    n = 2 ** bits
    levels = torch.linspace(-2.5, 2.5, n, dtype=torch.float64)
    normal = torch.distributions.Normal(0.0, 1.0)
    for _ in range(iters):
        edges = torch.cat([torch.tensor([-torch.inf]), (levels[1:] + levels[:-1]) / 2, torch.tensor([torch.inf])])
        pdf = torch.exp(normal.log_prob(edges.clamp(-40, 40)))
        mass = normal.cdf(edges[1:]) - normal.cdf(edges[:-1])
        levels = (pdf[:-1] - pdf[1:]) / mass.clamp(min=1e-300)
    bounds = (levels[1:] + levels[:-1]) / 2
    return (levels * sigma).float(), (bounds * sigma).float()


def _turboquant(k, v, s: Scheme, D: int):
    if s.k_bits == 8:
        kq = k.to(torch.float8_e4m3fn).float()
    else:
        H = hadamard(D)
        norm = k.norm(dim=-1, keepdim=True)
        y = (k / (norm + 1e-8)) @ H
        levels, bounds = gaussian_lloyd_max(s.k_bits, D ** -0.5)
        yq = levels[torch.bucketize(y, bounds)]
        if s.norm_correction:
            yq = yq / yq.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        kq = (yq @ H.T) * norm.half().float()
    return kq, _uniform(v, s.v_bits, D)


def _per_token_head(x, kind):
    """The engine's int8_per_token_head / fp8_per_token_head (aphrodite 0.21.0's per-token-head
    store kernel, rebuilt): one fp32 scale per token and head, max(absmax / QMAX, 1e-6); the scaled
    values clamped and stored, which truncates toward zero for int8 (a float stored into an int8
    tensor) and rounds to nearest for fp8 e4m3."""
    qmax = 127.0 if kind == "int8_pth" else 448.0
    scale = (x.abs().amax(-1, keepdim=True) / qmax).clamp(min=1e-6)
    y = x / scale
    if kind == "int8_pth":
        q = y.clamp(-128, 127).trunc()
    else:
        q = y.clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return q * scale


class KVTransform:
    """Per layer: (k, v) [T, Hkv, D] -> what the cache gives back, fp32."""

    def __init__(self, scheme: Scheme, head_dim: int, num_kv_heads: int, layers: int):
        self.s, self.D, self.layers = scheme, head_dim, layers
        if scheme.kind == "tiles":    # Hadamard, or rotation files (their K offsets unused: the zeros are per channel)
            self.rot_k = self._rotations(scheme.k_rotation, num_kv_heads, layers)
            self.rot_v = self._rotations(scheme.v_rotation, num_kv_heads, layers)
        if scheme.kind == "int2":
            self.layout = SlotLayout(head_dim, scheme.group_size)
            self.offsets = {}
            self.used_offsets = {}      # per layer: the K offset its keys were last encoded with
            self.rot_k = self._rotations(scheme.k_rotation, num_kv_heads, layers, keep_offsets=True)
            self.rot_v = self._rotations(scheme.v_rotation, num_kv_heads, layers)

    def _rotations(self, source, num_kv_heads, layers, keep_offsets=False):
        if source in ("hadamard", "none"):
            m = hadamard(self.D) if source == "hadamard" else torch.eye(self.D)
            return {i: m[None] for i in range(layers)}
        data = load_rotation_file(source, self.D, num_kv_heads, list(range(layers)))
        if keep_offsets:
            self.offsets = {i: d["k_offset"] for i, d in data.items() if "k_offset" in d}
        return {i: d["rotation"] for i, d in data.items()}

    def __call__(self, layer: int, k, v):
        s = self.s
        if s.kind == "fp":
            return k, v
        if s.kind == "naive":
            return _uniform(k, 2, self.D), _uniform(v, 2, self.D)
        if s.kind == "int4":
            H = hadamard(self.D)
            return (_uniform(k @ H, 4, s.group_size) @ H.T, _uniform(v @ H, 4, s.group_size) @ H.T)
        if s.kind == "turboquant":
            if layer < s.boundary or layer >= self.layers - s.boundary:
                return k, v
            return _turboquant(k, v, s, self.D)
        if s.kind == "tiles":
            rk, rv = self.rot_k[layer], self.rot_v[layer]
            sinks = torch.arange(k.shape[0]) < s.sink
            kq = tiles.channel_tiles(rotate(k, rk), s.tile, s.k_bits, s.norm_balance, exclude=sinks,
                                     meta_bits=s.meta_bits)
            vq = (tiles.channel_tiles(rotate(v, rv), s.tile, s.v_bits, s.norm_balance, exclude=sinks,
                                      meta_bits=s.meta_bits) if s.v_tiles
                  else tiles.token_groups(rotate(v, rv), s.group_size, s.v_bits))
            return rotate(kq, rk.transpose(-1, -2)), rotate(vq, rv.transpose(-1, -2))
        if s.kind in ("int8_pth", "fp8_pth"):
            return _per_token_head(k, s.kind), _per_token_head(v, s.kind)
        if s.kind == "fp8":
            def f8(x):
                scale = x.abs().amax(dim=(0, 2), keepdim=True).clamp(min=1e-6) / 448.0
                return (x / scale).to(torch.float8_e4m3fn).float() * scale
            return f8(k), f8(v)
        if s.kind == "kivi":   # K per channel over blocks of 32 tokens, V per token in groups of 32
            T = k.shape[0] // 32 * 32
            kt = k[:T].reshape(T // 32, 32, *k.shape[1:]).permute(0, 2, 3, 1)   # [blk, H, D, 32]
            kq = _uniform(kt, 2, 32).permute(0, 3, 1, 2).reshape(T, *k.shape[1:])
            return torch.cat([kq, k[T:]]), _uniform(v, 2, 32)
        # ours: rotate, encode into int2 slots exactly as the store kernel does, decode
        rk, rv = self.rot_k[layer], self.rot_v[layer]
        offset = torch.zeros(1, k.shape[1], self.D)
        if s.center:   # a calibrated offset from the rotation file, else the first 32 keys' mean
            off = self.offsets.get(layer)
            offset = off.reshape(-1, self.D)[None] if off is not None else k[:32].mean(0, keepdim=True)
            if s.center_from_cache and off is None:
                # what a reader of the cache alone can recompute: the first center_skip keys are
                # stored uncentered, so their dequantized mean is known to every later step
                n = min(s.center_skip, k.shape[0])
                first = encode_slots(rotate(k[:n], rk), rotate(v[:n], rv), self.layout, s.k_clip, s.v_clip,
                                     s.lloyd_max, s.std_range)
                kd0 = rotate(decode_slots(first, self.layout, s.lloyd_max)[0], rk.transpose(-1, -2))
                offset = kd0[min(s.center_mean_from, n - 1):].mean(0, keepdim=True)
        self.used_offsets[layer] = offset
        slots = encode_slots(rotate(k - offset, rk), rotate(v, rv), self.layout, s.k_clip, s.v_clip,
                             s.lloyd_max, s.std_range)
        kd, vd = decode_slots(slots, self.layout, s.lloyd_max)
        k_rec = rotate(kd, rk.transpose(-1, -2)) + offset
        if s.center and s.center_skip:
            # the first tokens (attention sinks: atypical keys) quantized without the offset; a
            # kernel keeps scores consistent by subtracting q.c for them
            n = min(s.center_skip, k.shape[0])
            first = encode_slots(rotate(k[:n], rk), rotate(v[:n], rv), self.layout, s.k_clip, s.v_clip,
                                 s.lloyd_max, s.std_range)
            k_rec = torch.cat([rotate(decode_slots(first, self.layout, s.lloyd_max)[0], rk.transpose(-1, -2)),
                               k_rec[n:]])
        return k_rec, rotate(vd, rv.transpose(-1, -2))

    def folded_scores(self, layer: int, q, k_rec, sm_scale):
        """Scores [Hq, T, T] (before sm_scale) of q [T, Hq, D] against the int2 keys k_rec [T, Hkv, D]
        as decode's folded tile computes them: the query rounded in the K-rotated basis meets the
        centered key, q . offset stays exact (reference.attend's folded_center). The offset is the
        one this transform encoded the layer's keys with (its last call for `layer`)."""
        if layer not in self.used_offsets:
            raise RuntimeError(f"int2 quality: folded_scores for layer {layer} before the transform encoded that "
                               "layer's keys; call the transform on the layer first (the scores use its K offset)")
        offset = self.used_offsets[layer]
        ratio = q.shape[1] // k_rec.shape[1]
        rk = self.rot_k[layer]
        rq = rk.repeat_interleave(ratio, 0) if rk.shape[0] > 1 else rk
        q_hat = rotate(query_codes(rotate(q, rq), sm_scale), rq.transpose(-1, -2))
        off = offset.reshape(-1, self.D).repeat_interleave(ratio, 0)                 # [Hq, D]
        kc = (k_rec - offset).repeat_interleave(ratio, 1).transpose(0, 1)           # [Hq, T, D]
        return q_hat.transpose(0, 1) @ kc.transpose(1, 2) + (q * off).sum(-1).transpose(0, 1)[..., None]


def full_precision_mask(scheme: Scheme, t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Which keys j each query t reads in full precision: the sinks, the recent window (for
    `tiles` with tile_staging, every tile not yet wholly out of it), KIVI's block being filled."""
    full = (j > t - scheme.recent) | (j < scheme.sink)
    if scheme.kind == "tiles" and scheme.tile_staging:
        full = full | ((j // scheme.tile + 1) * scheme.tile + scheme.recent - 1 > t)
    if scheme.kind == "kivi":   # KIVI keeps the block still being filled in full precision
        full = full | (j // 32 == t // 32)
    return full


QUERY_CHUNK = 512   # query rows per step: bounds the score matrix at long contexts


def attention_fn(scheme: Scheme, transform: KVTransform, sm_scale: float):
    """Causal attention where query t reads full-precision K/V for keys in its sink/recent window
    and the scheme's reconstruction elsewhere (a streaming cache, simulated over the window).
    Queries go in chunks; full-precision scores are computed only for the columns some query of
    the chunk reads in full precision."""

    def attn(layer, q, k, v):
        T, Hq, D = q.shape
        ratio = Hq // k.shape[1]
        kq, vq = transform(layer, k, v)
        kf, vf, kqh, vqh = (x.repeat_interleave(ratio, 1).transpose(0, 1) for x in (k, v, kq, vq))
        first = scheme.center_skip if scheme.center else 0
        out = torch.empty(Hq, T, D)
        for a in range(0, T, QUERY_CHUNK):
            b = min(T, a + QUERY_CHUNK)
            qh = q[a:b].transpose(0, 1)                                   # [Hq, t, D]
            t = torch.arange(a, b)[:, None]
            j = torch.arange(b)[None, :]
            s = qh @ kqh[:, :b].transpose(1, 2)
            if scheme.query_codes and scheme.kind == "int2":   # the first center_skip keys: the tail's, exact q
                s = torch.where(j >= first, transform.folded_scores(layer, q[a:b], kq[:b], sm_scale), s)
            full = full_precision_mask(scheme, t, j) if scheme.kind != "fp" else torch.zeros(b - a, b, dtype=torch.bool)
            cols = full.any(0).nonzero().squeeze(1)
            f = full[:, cols]
            if cols.numel():
                s[:, :, cols] = torch.where(f, qh @ kf[:, cols].transpose(1, 2), s[:, :, cols])
            p = (s * sm_scale).masked_fill(j > t, float("-inf")).softmax(-1)
            o = p @ vqh[:, :b]
            if cols.numel():
                o += (p[:, :, cols] * f) @ (vf[:, cols] - vqh[:, cols])
            out[:, a:b] = o
        return out.transpose(0, 1)

    return attn


def engine_default_scheme(group_size: int = 32):
    """What `--kv-cache-dtype int2` does with no settings (engine/options.py) on a head_dim-64 model
    such as SmolLM2: G = 32, std levels, Hadamard, the last 128 tokens in full precision, and
    data-free K centering (each sequence's offset = the mean of its first 16 keys as int2 reads
    them back; those 16 stored uncentered)."""
    return Scheme(f"engine default: int2 hadamard G{group_size} std-range + recent128 + "
                  f"data-free K-center 16", "int2", group_size=group_size, std_range=True, center=True,
                  center_skip=16, center_from_cache=True, recent=128)


def engine_dtype_schemes():
    """One row per KV-cache dtype aphrodite offers that this harness can rebuild, beside int2's
    default (`aphrodite-int2kv eval --schemes engine-dtypes`)."""
    return [Scheme("fp", "fp", engine_dtype="auto"), Scheme("fp8 e4m3 per-head", "fp8", engine_dtype="fp8"),
            Scheme("int8_per_token_head (engine dtype, rebuilt)", "int8_pth", engine_dtype="int8_per_token_head"),
            Scheme("fp8_per_token_head (engine dtype, rebuilt)", "fp8_pth", engine_dtype="fp8_per_token_head"),
            *(dataclasses.replace(turboquant_preset(n), engine_dtype=n)
              for n in ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc")),
            dataclasses.replace(engine_default_scheme(), engine_dtype="int2")]


def standard_schemes():
    """The default table of `aphrodite-int2kv eval` (issue: every row users compare)."""
    return [
        Scheme("fp", "fp"),
        Scheme("naive 2-bit per token", "naive"),
        Scheme("kivi 2-bit", "kivi"),
        Scheme("kivi 2-bit + recent 128", "kivi", recent=128),
        Scheme("fp8 e4m3 per-head", "fp8"),
        Scheme("int4 hadamard G32", "int4", group_size=32),
        Scheme("int2 hadamard G32", "int2", group_size=32),
        Scheme("int2 hadamard G64", "int2", group_size=64),
        Scheme("int2 hadamard G32 clip0.9", "int2", group_size=32, k_clip=0.9, v_clip=0.9),
        Scheme("int2 hadamard G32 lloyd-max", "int2", group_size=32, lloyd_max=True),
        Scheme("int2 hadamard G32 std-range", "int2", group_size=32, std_range=True),
        Scheme("int2 no-rotation G32", "int2", group_size=32, k_rotation="none", v_rotation="none"),
        Scheme("int2 hadamard G32 + sink4 + recent128", "int2", group_size=32, sink=4, recent=128),
        Scheme("int2 hadamard G32 + sink4 + recent128 + K-center", "int2", group_size=32, sink=4,
               recent=128, center=True),
        Scheme("engine default: int2 hadamard G32 std-range + recent128", "int2", group_size=32,
               std_range=True, recent=128),
        engine_default_scheme(),
        dataclasses.replace(engine_default_scheme(), name="engine default, decode's int8 query",
                            query_codes=True),
    ]


def engine_tiles_scheme(k_bits: int = 3) -> Scheme:
    """What the engine stores with APHRODITE_INT2KV_FORMAT=tiles: K3 (or with K_BITS=4, K4) / V2
    channel tiles of 64, 8-bit metadata, the first 4 positions (sinks, left out of tile 0's ranges)
    and the last 128 in full precision, every other one read from its tile's record (no staging tile)."""
    from aphrodite_int2kv.engine.options import TILE, TILE_SINKS

    setting = "" if k_bits == 3 else f" K_BITS={k_bits}"
    return Scheme(f"engine FORMAT=tiles{setting}: K{k_bits} V2 tile{TILE} meta8 + sink{TILE_SINKS} + recent128", "tiles",
                  k_bits=k_bits,
                  v_bits=2, tile=TILE, v_tiles=True, meta_bits=8, recent=128, sink=TILE_SINKS, tile_staging=False)


def longctx_schemes(sweep: bool = False):
    """The rows of `aphrodite-int2kv longctx`: the references, today's int2 default, and the
    channel-tile format the long-context measurements chose (K3 / V2, tiles of 32 and 64, 8-bit
    metadata; int2/tiles.py); `sweep` adds every variant of the design study (tile length, bits,
    norm balancing, sinks, V layout, metadata), in the order they were added."""
    def tiles(k_bits, v_bits, tile=32, sink=4, **kw):
        extra = "".join(f" {k}={v}" for k, v in kw.items())
        return Scheme(f"tiles K{k_bits} V{v_bits} tile{tile}{extra} + sink{sink} + recent128", "tiles",
                      k_bits=k_bits, v_bits=v_bits, tile=tile, sink=sink, recent=128, **kw)

    rows = [Scheme("fp", "fp"), Scheme("fp8 e4m3 per-head", "fp8"), engine_default_scheme(),
            Scheme("kivi 2-bit + recent 128", "kivi", recent=128),
            tiles(3, 2, v_tiles=True, meta_bits=8), tiles(3, 2, tile=64, v_tiles=True, meta_bits=8),
            engine_tiles_scheme(), engine_tiles_scheme(4)]
    if sweep:
        rows += [tiles(2, 2), tiles(2, 2, norm_balance=False), tiles(3, 2), tiles(3, 3), tiles(4, 2),
                 tiles(3, 2, tile=64), tiles(2, 2, v_tiles=True),
                 Scheme("int4 hadamard G32 + recent128", "int4", recent=128),
                 tiles(2, 2, sink=0), tiles(2, 2, sink=16), tiles(2, 2, tile=64), tiles(2, 2, tile=128),
                 tiles(2, 3), tiles(2, 4), tiles(3, 4), tiles(4, 4), tiles(4, 3),
                 tiles(3, 3, tile=64), tiles(3, 3, tile=128), tiles(3, 2, tile=128), tiles(4, 2, tile=128),
                 tiles(4, 3, tile=128), tiles(3, 2, group_size=64), tiles(3, 3, group_size=64),
                 tiles(3, 3, tile=128, group_size=64), tiles(3, 2, v_tiles=True), tiles(3, 3, v_tiles=True),
                 tiles(3, 3, norm_balance=False),
                 tiles(2, 2, tile=128, v_tiles=True), tiles(3, 2, tile=64, v_tiles=True),
                 tiles(3, 2, tile=128, v_tiles=True), tiles(3, 2, tile=128, sink=0, v_tiles=True),
                 tiles(3, 2, tile=256, v_tiles=True), tiles(3, 3, tile=128, v_tiles=True),
                 tiles(4, 2, tile=128, v_tiles=True), tiles(4, 2, tile=256, v_tiles=True),
                 tiles(3, 2, tile=128, group_size=64),
                 tiles(3, 3, v_tiles=True, meta_bits=8), tiles(4, 2, tile=64, v_tiles=True, meta_bits=8),
                 tiles(3, 2, tile=16, v_tiles=True, meta_bits=8)]
    return rows
