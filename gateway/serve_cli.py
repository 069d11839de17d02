"""`voxgate serve`: the command line generated from the settings fields (gateway/settings.py),
turned into GatewaySettings.

Imports stay light so `voxgate --help` and `voxgate synth` never pay for the server stack
(uvicorn, Starlette, PyAV, torch); the app is imported when `serve` runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

SERVE_HELP = """run the WebSocket gateway (and the web demo at /). Settings come from the command
line, VOXGATE_* environment variables and an optional TOML file (--config), in that order of
precedence; the options under "expert:" headings tune the engine and the streams."""


def add_serve_parser(subparsers) -> None:
    from gateway.settings import add_options  # light: no torch, no server stack

    p = subparsers.add_parser(
        "serve",
        help="run the WebSocket gateway (and the web demo at /)",
        description=SERVE_HELP,
        usage="%(prog)s [--config PATH] [--model MODEL] [--host HOST] [--port N] [options]",
    )
    add_options(p)
    p.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None):
    """The parsed command line (with the environment and any --config file) → validated
    GatewaySettings (raises ConfigError, a ValueError)."""
    from gateway.settings import load_settings, options

    keys = {o.key for o in options()}
    given = {k: v for k, v in vars(args).items() if k in keys}
    settings = load_settings(given, environ, getattr(args, "config", None))
    if settings.engine.trace_path:
        _check_writable(settings.engine.trace_path)
    return settings


def run_serve(args: argparse.Namespace) -> int:
    import os

    from gateway.startup import serve

    warn_unknown_environment(os.environ)
    settings = settings_from_args(args)
    # Port, model, weights and KV cache are checked before serving; a bad one is one line.
    return serve(settings, getattr(args, "log_level", "info").lower())


def warn_unknown_environment(environ: Mapping[str, str]) -> None:
    """A warning per VOXGATE_* variable that no setting reads: a mistyped name would otherwise
    be ignored in silence (VOXGATE_API_KEYZ leaving the server open)."""
    import logging

    from gateway.settings import unknown_environment

    for line in unknown_environment(environ):
        logging.getLogger("voxgate.gateway").warning("%s", line)


def _check_writable(path: str) -> None:
    """--trace-requests must name a file the engine can append to: say so now, in one line,
    rather than when the engine process starts."""
    from engine.api import ConfigError

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--trace-requests {path}: cannot write there ({exc.strerror or exc}); "
            "give a file in a writable folder"
        ) from None
