"""``aphrodite-int2kv`` command line: ``doctor``, ``eval``, ``longctx``, ``make-rotation``, ``calibrate``, ``k-offsets``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from aphrodite_int2kv.cli import doctor, eval as eval_cmd, rotations

    parser = argparse.ArgumentParser(prog="aphrodite-int2kv")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor.add_parser(sub)
    eval_cmd.add_parser(sub)
    eval_cmd.add_longctx_parser(sub)
    rotations.add_parsers(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
