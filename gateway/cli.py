"""The `voxgate` command line: `serve`, `synth` and `bench`. Each subcommand's module keeps
its imports light, so `voxgate --help` never loads torch or the server stack.

`bench` is implemented by the `voxbench` package, which imports the gateway, never the other
way round: this entry point is the one place that names it, and only when it builds the
parser."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.serve_cli import add_serve_parser
from gateway.synth import add_synth_parser


def build_parser() -> argparse.ArgumentParser:
    from voxbench.cli import add_bench_parser

    parser = argparse.ArgumentParser(
        prog="voxgate", description="Real-time voice gateway for SpeechLMs"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING …")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    add_synth_parser(sub)
    add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, RuntimeError) as exc:  # configuration / checkpoint errors: say, don't trace
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
