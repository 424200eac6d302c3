"""Engine side of the int2 KV cache: options, the attention backend, and the per-version
KV-cache API adapter. Imports aphrodite; the kernels and the format do not."""
