"""The int2 KV format in plain torch: byte layout, rotations, quantizer and references.
No engine imports here (testable anywhere, reused by the engine adapter)."""
