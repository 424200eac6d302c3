"""Triton kernels for the int2 KV cache: store, split-KV grouped decode, prefill/extend.
Byte layout: docs/format.md (and aphrodite_int2kv/int2/format.py). No engine imports here."""

import os


def interpreting() -> bool:
    """Under TRITON_INTERPRET=1 (CPU tests) bf16 dots are not computed correctly, so kernels
    do their dots in fp32 there; on a GPU they use the activation dtype."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
