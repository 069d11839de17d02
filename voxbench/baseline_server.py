"""`python -m voxbench.baseline_server`: the HF baseline behind the real gateway app.

The app, session, pacing, Opus and admission code are the gateway's own (`create_app` with the
baseline passed as its engine); only what produces the audio differs from `voxgate serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m voxbench.baseline_server",
        description="Serve the per-request Hugging Face baseline over /v1/stream",
    )
    p.add_argument(
        "--model",
        default="tiny-orpheus",
        help="a preset or checkpoint folder of a family with a baseline (voxbench/baselines.py)",
    )
    p.add_argument(
        "--random-weights", action="store_true", help="a preset's real config, random weights"
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if present)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--log-level", default="WARNING")
    return p


async def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from gateway.app import create_app, uvicorn_config
    from gateway.config import GatewaySettings
    from voxbench.baselines import load_baseline

    baseline = await asyncio.to_thread(load_baseline, args.model, args.device, args.random_weights)
    settings = GatewaySettings(model=args.model, host=args.host, port=args.port)
    app = create_app(settings, engine=baseline)
    server = uvicorn.Server(uvicorn_config(app, settings, log_level=args.log_level.lower()))
    try:
        await server.serve()
    finally:
        await baseline.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
