"""The `voxgate` command line: `serve` and `synth`."""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.synth import add_synth_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxgate", description="Real-time voice gateway for SpeechLMs")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING …")
    sub = parser.add_subparsers(dest="command", required=True)
    add_synth_parser(sub)
    __import__("gateway.bench.cli", fromlist=["add_bench_parser"]).add_bench_parser(sub)  # `bench`
    # `serve` is added here by gateway.serve_cli (the gateway's own options live with it).
    try:
        from gateway.serve_cli import add_serve_parser
    except ImportError:  # the gateway's server part is not installed in this build
        pass
    else:
        add_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, RuntimeError) as exc:  # configuration / checkpoint errors: say, don't trace
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
