"""int2 settings from the environment (the same in every engine process, since spawned engine
cores and workers inherit it). Validated at start-up with errors that name the variable.

| variable | default | meaning |
|---|---|---|
| APHRODITE_INT2KV_GROUP_SIZE | auto | elements per scale/zero group: 32, 64, 128 or 256, dividing head_dim; auto = 64 (32 for head_dim 64, where 64 saves no bytes) |
| APHRODITE_INT2KV_K_ROTATION | hadamard | `hadamard`, `none`, or a rotation file (docs/format.md) |
| APHRODITE_INT2KV_V_ROTATION | hadamard | same, for V |
| APHRODITE_INT2KV_K_CLIP | 1.0 | clip ratio for K groups, in [0.5, 1.0] |
| APHRODITE_INT2KV_V_CLIP | 1.0 | clip ratio for V groups |
| APHRODITE_INT2KV_LEVELS | std | `std`: uniform levels over the group's mean +- 1.5 x 0.9957 std (+4.2 % PPL on SmolLM2 with the window; min/max +18.8 %); `minmax`: uniform over the group's min/max (the clip ratios apply); `lloyd-max`: 4 Lloyd-Max levels (+4.3 %, +18-29 % decode time) |
| APHRODITE_INT2KV_K_CENTER_SKIP | 4 | with K offsets: the first N tokens of each sequence (attention sinks) are stored uncentered |
| APHRODITE_INT2KV_K_CENTER_FIRST | auto | data-free K centering: the offset of each sequence is the mean of its first N keys as the cache holds them (those N stay uncentered); auto = 16 (+2.5 % PPL on SmolLM2 instead of +4.2 %, -0.9 % decode throughput at 32K), or 0 (off) when the K rotation file carries offsets; 0 = off |
| APHRODITE_INT2KV_RECENT_WINDOW | 128 | the last R tokens of each sequence are also kept in bf16/fp16 and read from there (0 = off) |
| APHRODITE_INT2KV_FORMAT | tiles | `tiles`: the long-context format, K 3-bit and V 2-bit quantized per channel across tiles of 64 tokens when they leave the recent window (docs/format.md, "Channel-tile format"; the group, level, clip, centering and decode-tile settings do not apply to it); `tokens`: 2-bit K and V in per-token groups (the settings above), faster to decode but it loses what the model saw more than a few hundred tokens back (docs/quality.md) |
| APHRODITE_INT2KV_K_BITS | 3 | `FORMAT=tiles`: bits per key code, 3 or 4 (values keep 2). 4 costs 16 more bytes per token and KV head at head_dim 64, 32 at 128 (4.7x bf16's capacity instead of 5.5x by bytes at head_dim 128) and copies and predicts far context closer to full precision (docs/quality.md) |
| APHRODITE_INT2KV_LOCAL_KV_DTYPE | auto | models with sliding-window (local) layers (Gemma 2/3, Mistral-style): int2 goes to the global layers, and the local layers keep the engine's own cache in `auto` (the model dtype) or `fp8` (docs/format.md, "Sliding-window models") |
| APHRODITE_INT2KV_DECODE_TILE | auto | decode's int2 tile: `folded` (codes straight into the tensor cores, scale and zero applied to the dot products; uniform levels only), `per-code` (each code dequantized first); auto = folded for `std`/`minmax` levels, per-code for `lloyd-max` |
"""

from __future__ import annotations

import dataclasses
import functools
import os

from aphrodite_int2kv.int2.format import GROUP_SIZES, Int2ConfigError, default_group_size
from aphrodite_int2kv.int2.tile_format import K_BITS, TileLayout
from aphrodite_int2kv.int2.quantizer import check_options

INT2 = "int2"            # the --kv-cache-dtype this package adds
PREFIX = "APHRODITE_INT2KV_"
# every APHRODITE_INT2KV_* name the plugin reads: the options below, the quality tools' cache
# folder (quality/assets.py) and the launch planner's stand-in GPU (kernels/limits.py)
OPTION_NAMES = ("GROUP_SIZE", "K_ROTATION", "V_ROTATION", "K_CLIP", "V_CLIP", "LEVELS", "K_CENTER_SKIP",
                "K_CENTER_FIRST", "RECENT_WINDOW", "DECODE_TILE", "FORMAT", "LOCAL_KV_DTYPE", "K_BITS")
KNOWN = OPTION_NAMES + ("CACHE", "DEVICE_LIMITS")
LEVELS = ("std", "minmax", "lloyd-max")
DECODE_TILES = ("auto", "folded", "per-code")
FORMATS = ("tiles", "tokens")
LOCAL_KV_DTYPES = ("auto", "fp8")
TILE = 64                # tokens per tile of the `tiles` format
TILE_SINKS = 4           # the first positions of each sequence, kept in the recent window in full precision (`tiles`)
# settings of the per-token format only: a user who sets one with FORMAT=tiles is told so
TOKEN_FORMAT_ONLY = ("GROUP_SIZE", "K_CLIP", "V_CLIP", "LEVELS", "K_CENTER_SKIP", "K_CENTER_FIRST", "DECODE_TILE")


DATA_FREE_FIRST = 16     # measured best on SmolLM2 (docs/quality.md)
# the defaults that differ by format, said once: the tile format centers no keys (its per-channel
# zeros take the offset); the per-token format stores the first 4 tokens uncentered and centers on
# the mean of the first keys (None = auto: DATA_FREE_FIRST, or 0 where the K rotation file carries offsets)
FORMAT_DEFAULTS = {"tiles": dict(k_center_skip=0, k_center_first=0),
                   "tokens": dict(k_center_skip=4, k_center_first=None)}


def _center_first(raw: str):
    """K_CENTER_FIRST: 'auto' (None: resolved in from_env) or an integer."""
    return None if raw.strip().lower() == "auto" else int(raw)


def _file_offsets(rotation: str) -> bool:
    """Whether a K rotation setting is a file that carries K offsets ('k_offset'). Options are read
    per layer, and resolving K_CENTER_FIRST=auto, validating and describing each ask this: the file
    is loaded once per version of it (path, size, mtime), not three times per layer."""
    if rotation in ("hadamard", "none") or not os.path.isfile(rotation):
        return False
    st = os.stat(rotation)
    return _file_offsets_cached(rotation, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _file_offsets_cached(path: str, size: int, mtime_ns: int) -> bool:
    from aphrodite_int2kv.int2.rotation import file_has_k_offsets

    return file_has_k_offsets(path)


@functools.lru_cache(maxsize=16)
def _rotation_file_problem(path: str, size: int, mtime_ns: int) -> str:
    """What is wrong with a rotation file, whatever model it is used with ('' if nothing): read
    once per version of the file, at start-up and by `doctor` alike."""
    from aphrodite_int2kv.int2.rotation import check_rotation_file

    try:
        check_rotation_file(path)
    except Int2ConfigError as exc:
        return str(exc)
    return ""


def unknown_names(env) -> list[str]:
    """APHRODITE_INT2KV_* variables the plugin does not read (a typo would otherwise keep the
    default silently): each logged once per process with the setting it was probably meant to be."""
    import difflib
    import logging

    unknown = sorted(k for k in env if k.startswith(PREFIX) and k[len(PREFIX):] not in KNOWN + ("LLOYD_MAX",))
    for name in unknown:
        if name not in _warned:
            _warned.add(name)
            guess = difflib.get_close_matches(name[len(PREFIX):], KNOWN, n=1)
            hint = f"; did you mean {PREFIX}{guess[0]}?" if guess else f"; the settings are {', '.join(OPTION_NAMES)}"
            logging.getLogger("aphrodite_int2kv").warning("%s is not an aphrodite-int2kv setting and is ignored%s",
                                                          name, hint)
    return unknown


_warned: set[str] = set()


def _group(raw: str):
    """GROUP_SIZE: 'auto' (None: default_group_size per head_dim) or an integer."""
    return None if raw.strip().lower() == "auto" else int(raw)


@dataclasses.dataclass(frozen=True)
class Int2Options:
    group_size: int | None = None      # None: default_group_size(head_dim)
    k_rotation: str = "hadamard"
    v_rotation: str = "hadamard"
    k_clip: float = 1.0
    v_clip: float = 1.0
    levels: str = "std"
    k_center_skip: int = FORMAT_DEFAULTS["tiles"]["k_center_skip"]     # FORMAT_DEFAULTS, per format
    k_center_first: int = FORMAT_DEFAULTS["tiles"]["k_center_first"]
    recent_window: int = 128
    decode_tile: str = "auto"
    format: str = "tiles"             # the defaults above are the tile format's: no K centering
    local_kv_dtype: str = "auto"      # the engine dtype of sliding-window layers beside int2 layers
    k_bits: int = 3                   # FORMAT=tiles: bits per key code (3 or 4)

    @classmethod
    def from_env(cls, env=None) -> "Int2Options":
        env = os.environ if env is None else env

        def get(name, default, conv, what):
            raw = env.get(PREFIX + name)
            if raw is None or raw == "":
                return default
            try:
                return conv(raw)
            except ValueError:
                raise Int2ConfigError(f"{PREFIX}{name}={raw!r} is not {what}") from None

        if env.get(PREFIX + "LLOYD_MAX"):
            raise Int2ConfigError(f"{PREFIX}LLOYD_MAX was replaced by {PREFIX}LEVELS (std, minmax or "
                                  f"lloyd-max); for Lloyd-Max levels set {PREFIX}LEVELS=lloyd-max")
        unknown_names(env)
        fmt = get("FORMAT", "tiles", lambda r: r.strip().lower(), "a format")
        defaults = FORMAT_DEFAULTS.get(fmt, FORMAT_DEFAULTS["tiles"])   # (an unknown format fails in validate)
        opts = cls(
            group_size=get("GROUP_SIZE", None, _group, f"'auto' or one of {GROUP_SIZES}"),
            k_rotation=get("K_ROTATION", "hadamard", str, "a rotation"),
            v_rotation=get("V_ROTATION", "hadamard", str, "a rotation"),
            k_clip=get("K_CLIP", 1.0, float, "a number"),
            v_clip=get("V_CLIP", 1.0, float, "a number"),
            levels=get("LEVELS", "std", str, "a level mode"),
            k_center_skip=get("K_CENTER_SKIP", defaults["k_center_skip"], int, "an integer number of tokens"),
            k_center_first=get("K_CENTER_FIRST", defaults["k_center_first"], _center_first,
                               "'auto' or an integer number of tokens (0 = off)"),
            recent_window=get("RECENT_WINDOW", 128, int, "an integer number of tokens (0 = off)"),
            decode_tile=get("DECODE_TILE", "auto", lambda r: r.strip().lower(), "a decode tile"),
            format=fmt,
            local_kv_dtype=get("LOCAL_KV_DTYPE", "auto", lambda r: r.strip().lower(), "a KV-cache dtype"),
            k_bits=get("K_BITS", 3, int, "an integer number of bits (3 or 4)"),
        )
        if fmt == "tokens" and env.get(PREFIX + "K_BITS"):
            raise Int2ConfigError(f"{PREFIX}K_BITS is a setting of the tile format (the default), and "
                                  f"{PREFIX}FORMAT=tokens stores 2-bit keys; unset one of them")
        if fmt == "tiles":   # (its defaults above need no per-token setting)
            given = [PREFIX + n for n in TOKEN_FORMAT_ONLY if env.get(PREFIX + n)]
            if given:
                default = "" if env.get(PREFIX + "FORMAT") else " (the default)"
                raise Int2ConfigError(f"{', '.join(given)}: setting(s) of the per-token format, which "
                                      f"{PREFIX}FORMAT=tiles{default} does not use; unset them, or set "
                                      f"{PREFIX}FORMAT=tokens")
        if opts.k_center_first is None:   # auto: data-free centering unless a file gives offsets
            opts = dataclasses.replace(opts, k_center_first=0 if _file_offsets(opts.k_rotation) else DATA_FREE_FIRST)
        opts.validate()
        return opts

    @property
    def tiles(self) -> bool:
        """The long-context channel-tile format (FORMAT=tiles)."""
        return self.format == "tiles"

    def tile_layout(self, head_dim: int):
        """FORMAT=tiles: the tile records of layers with this head_dim (int2/tile_format.py)."""
        return TileLayout(head_dim, TILE, self.k_bits)

    def group_for(self, head_dim: int) -> int:
        """The group size of layers with this head_dim."""
        return default_group_size(head_dim) if self.group_size is None else self.group_size

    @property
    def lloyd_max(self) -> bool:
        return self.levels == "lloyd-max"

    @property
    def std_range(self) -> bool:
        return self.levels == "std"

    @property
    def fold_decode(self) -> bool:
        """Whether decode runs the folded tile (kernels/folded.py int2_tile_folded): it folds a
        uniform grid's scale and zero into the dot products, which Lloyd-Max levels are not."""
        if self.decode_tile == "auto":
            return not self.lloyd_max
        return self.decode_tile == "folded"

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise Int2ConfigError(f"{PREFIX}FORMAT={self.format!r} is not one of {', '.join(FORMATS)}")
        if self.tiles and self.recent_window < TILE:
            raise Int2ConfigError(f"{PREFIX}RECENT_WINDOW={self.recent_window}: {PREFIX}FORMAT=tiles keeps a tile's "
                                  f"tokens in the recent window until the tile is whole, so the window must hold at "
                                  f"least {TILE} tokens (128 is the measured default); a smaller window needs "
                                  f"{PREFIX}FORMAT=tokens")
        if self.k_bits not in K_BITS:
            raise Int2ConfigError(f"{PREFIX}K_BITS={self.k_bits} is not one of {', '.join(map(str, K_BITS))} "
                                  f"(bits per key code of the tile format; 3 is the default)")
        if self.local_kv_dtype not in LOCAL_KV_DTYPES:
            raise Int2ConfigError(f"{PREFIX}LOCAL_KV_DTYPE={self.local_kv_dtype!r} is not one of "
                                  f"{', '.join(LOCAL_KV_DTYPES)} (the engine cache dtype of sliding-window layers; "
                                  f"auto = the model dtype)")
        if self.levels not in LEVELS:
            raise Int2ConfigError(f"{PREFIX}LEVELS={self.levels!r} is not one of {', '.join(LEVELS)} "
                                  f"(std is the measured default)")
        if self.decode_tile not in DECODE_TILES:
            raise Int2ConfigError(f"{PREFIX}DECODE_TILE={self.decode_tile!r} is not one of "
                                  f"{', '.join(DECODE_TILES)} (auto is the measured default)")
        if self.decode_tile == "folded" and self.lloyd_max:
            raise Int2ConfigError(f"{PREFIX}DECODE_TILE=folded needs uniform levels, and {PREFIX}LEVELS is "
                                  f"'lloyd-max'; unset DECODE_TILE (auto picks per-code for Lloyd-Max) or "
                                  f"set LEVELS=std")
        if not 0 <= self.k_center_skip <= 256:
            raise Int2ConfigError(f"{PREFIX}K_CENTER_SKIP={self.k_center_skip} must be between 0 and 256 "
                                  f"tokens (4 is the measured default)")
        if not 0 <= self.k_center_first <= 256:
            raise Int2ConfigError(f"{PREFIX}K_CENTER_FIRST={self.k_center_first} must be between 0 (off) and 256 "
                                  f"tokens (16 measured best on SmolLM2)")
        if self.k_center_first and _file_offsets(self.k_rotation):
            raise Int2ConfigError(f"{PREFIX}K_CENTER_FIRST={self.k_center_first} and the K offsets of "
                                  f"{PREFIX}K_ROTATION={self.k_rotation!r} both center K: use one (unset "
                                  f"K_CENTER_FIRST or set it to 0, or a rotation file without 'k_offset')")
        if not 0 <= self.recent_window <= 65536:
            raise Int2ConfigError(f"{PREFIX}RECENT_WINDOW={self.recent_window} must be between 0 (off) and "
                                  f"65536 tokens (128 is the measured default)")
        if self.group_size is not None and self.group_size not in GROUP_SIZES:
            raise Int2ConfigError(f"{PREFIX}GROUP_SIZE={self.group_size} is not 'auto' or one of {GROUP_SIZES}")
        for name, clip in (("K_CLIP", self.k_clip), ("V_CLIP", self.v_clip)):
            if self.levels != "minmax" and clip != 1.0:
                raise Int2ConfigError(f"{PREFIX}{name}={clip}: clip ratios shrink the min/max range only, and "
                                      f"{PREFIX}LEVELS is {self.levels!r}; set {PREFIX}LEVELS=minmax to clip, "
                                      f"or leave {name} unset")
            check_options(clip, self.lloyd_max, f"{PREFIX}{name}: ", self.std_range)
        for name, rot in (("K_ROTATION", self.k_rotation), ("V_ROTATION", self.v_rotation)):
            if rot not in ("hadamard", "none") and not os.path.isfile(rot):
                raise Int2ConfigError(f"{PREFIX}{name}={rot!r}: expected 'hadamard', 'none' or an "
                                      f"existing rotation file (aphrodite-int2kv make-rotation)")
            if rot not in ("hadamard", "none"):
                st = os.stat(rot)
                problem = _rotation_file_problem(rot, st.st_size, st.st_mtime_ns)
                if problem:
                    raise Int2ConfigError(f"{PREFIX}{name}: {problem}")

        if self.tiles and _file_offsets(self.k_rotation):
            raise Int2ConfigError(f"{PREFIX}K_ROTATION={self.k_rotation!r} carries K offsets ('k_offset'), "
                                  f"which {PREFIX}FORMAT=tiles does not use (its per-channel zeros take the "
                                  f"offset): use a rotation file without offsets, or {PREFIX}FORMAT=tokens")

    def describe(self, head_dim: int | None = None) -> str:
        if self.tiles:
            return (f"format=tiles (K {self.k_bits}-bit / V 2-bit per channel across tiles of {TILE} tokens, norm-balanced, "
                    f"e4m3 scales) K-rot={self.k_rotation} V-rot={self.v_rotation} "
                    f"recent window={self.recent_window}")
        quant = {"std": "levels=std", "minmax": "levels=minmax", "lloyd-max": "levels=Lloyd-Max"}[self.levels]
        center = _file_offsets(self.k_rotation)
        if head_dim is not None:
            group = str(self.group_for(head_dim)) + (" (auto)" if self.group_size is None else "")
        else:
            group = "auto (64; 32 for head_dim 64)" if self.group_size is None else str(self.group_size)
        if center:
            how = f"file offsets (first {self.k_center_skip} tokens uncentered)"
        elif self.k_center_first:
            how = f"mean of each sequence's first {self.k_center_first} keys (data-free; those uncentered)"
        else:
            how = "off"
        return (f"G={group} {quant} K-rot={self.k_rotation} V-rot={self.v_rotation} "
                f"clip K/V={self.k_clip}/{self.v_clip} K-center={how} "
                f"recent window={self.recent_window or 'off'} "
                f"decode tile={'folded' if self.fold_decode else 'per-code'}")


def options() -> Int2Options:
    """The settings of this process (APHRODITE_INT2KV_* variables)."""
    return Int2Options.from_env()


def slot_bytes_for(head_size: int, opts: Int2Options | None = None) -> int:
    """Bytes per token and KV head in the int2 cache: one slot at this process's group size, or
    with FORMAT=tiles a tile record's bytes per token (pages hold whole tiles)."""
    from aphrodite_int2kv.int2.format import SlotLayout

    opts = opts or options()
    if opts.tiles:
        return opts.tile_layout(head_size).token_bytes
    return SlotLayout(head_size, opts.group_for(head_size)).slot_bytes
