"""The `voxgate` command line: `serve`, `synth` and `bench`. Each subcommand's module keeps
its imports light, so `voxgate --help` never loads torch or the server stack."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.bench.cli import add_bench_parser
from gateway.serve_cli import add_serve_parser
from gateway.synth import add_synth_parser


def build_parser() -> argparse.ArgumentParser:
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
