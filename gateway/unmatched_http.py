"""HTTP requests no route serves: a known path asked with another method gets 405 with `Allow`,
an unknown `/v1/...` path a JSON 404 naming the API's routes, any other path the web demo's
files (or a plain 404). Both errors are in OpenAI's shape, as the API's others are.

The web demo is the router's default app, not a `Mount("/")` route: a mount at "/" matches
every path in full, so Starlette would hand it a request whose path a route matches only by
method, and the demo would answer 404 where the route should answer 405."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from gateway.http_common import HttpError, error_response

API_PREFIX = "/v1/"


def allowed_methods(routes: Sequence[BaseRoute], path: str) -> list[str]:
    """Every method some HTTP route at `path` answers, sorted (several routes may share a path,
    as `/v1/voices`' GET and POST do)."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
    return sorted(methods)


def api_routes(routes: Sequence[BaseRoute]) -> str:
    """The API's routes as a user would call them: `POST /v1/audio/speech, ...; WebSocket: ...`
    (HEAD left out: Starlette adds it to every GET)."""
    http = [
        f"{'/'.join(sorted(route.methods - {'HEAD'}))} {route.path}"
        for route in routes
        if isinstance(route, Route) and route.path.startswith(API_PREFIX) and route.methods
    ]
    sockets = [
        route.path
        for route in routes
        if isinstance(route, WebSocketRoute) and route.path.startswith(API_PREFIX)
    ]
    return f"{', '.join(http)}; WebSocket: {', '.join(sockets)}"


def method_not_allowed_handler(routes: Sequence[BaseRoute]):
    """The app's handler for a route's 405: JSON, with `Allow` naming every route's methods at
    the path (the router's own names only the first route's)."""

    async def handle(request: Request, exc: HTTPException) -> Response:
        path = request.url.path
        allowed = allowed_methods(routes, path)
        if not allowed:  # not a route's 405 (the web demo's files take only GET and HEAD)
            return PlainTextResponse(exc.detail, status_code=405, headers=exc.headers)
        uses = ", ".join(f"{method} {path}" for method in allowed if method != "HEAD")
        error = HttpError(
            405,
            f"{request.method} is not served at {path}: use {uses}",
            kind="invalid_request_error",
            code="method_not_allowed",
        )
        response = error_response(error)
        response.headers["Allow"] = ", ".join(allowed)
        return response

    return handle


class UnmatchedHttp:
    """The router's default app: what a request no route matches gets (see the module's note)."""

    def __init__(self, routes: Sequence[BaseRoute], web_demo: ASGIApp | None) -> None:
        self._listing = api_routes(routes)
        self._web_demo = web_demo

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if scope["type"] == "http" and (path + "/").startswith(API_PREFIX):
            message = f"no HTTP endpoint at {path}; the API's routes: {self._listing}"
            await error_response(HttpError(404, message, code="not_found"))(scope, receive, send)
        elif scope["type"] == "http" and self._web_demo is not None:
            await self._web_demo(scope, receive, send)
        elif scope["type"] == "http":
            await PlainTextResponse("Not Found", status_code=404)(scope, receive, send)
        else:  # a WebSocket gets here only without the app's catch-all socket route
            await WebSocketClose()(scope, receive, send)
