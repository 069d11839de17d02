"""What the HTTP routes (`POST /v1/audio/speech`, `/v1/voices`) share: errors in OpenAI's shape,
`{"error": {message, type, param, code}}`, with Retry-After on 429/503, and the caller checked
by the API keys with the engine ready."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

from gateway.auth import Denial, Principal

RETRY_AFTER_S = 1  # what a 429 / 503 asks the client to wait


class HttpError(Exception):
    """An answer in OpenAI's error shape: `{"error": {message, type, param, code}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def bad(param: str | None, message: str, code: str | None = "invalid_value") -> HttpError:
    """A 400 for the request field `param`."""
    return HttpError(400, message, param, code=code)


def unavailable(message: str, status: int = 503, kind: str = "server_error") -> HttpError:
    """A 503 (or 429) the client may retry after RETRY_AFTER_S."""
    return HttpError(status, message, kind=kind, retry_after_s=RETRY_AFTER_S)


def error_response(error: HttpError) -> JSONResponse:
    headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def authorize(gateway, headers: Mapping[str, str]) -> Principal:
    """The caller of an HTTP route, by the API keys (gateway/auth.py), with the engine ready;
    otherwise HttpError in OpenAI's shape (a refused key counted in voxgate_handshakes_refused).
    `gateway` is gateway.app.Gateway."""
    verdict = gateway.auth.check(headers, [])
    if isinstance(verdict, Denial):
        gateway.metrics.handshakes_refused.labels(str(verdict.status)).inc()
        code = "invalid_api_key" if verdict.status in (401, 403) else None
        kind = "authentication_error" if verdict.status == 401 else "permission_error"
        raise HttpError(verdict.status, verdict.message, kind=kind, code=code)
    engine = gateway.engine
    if engine is None or not engine.ready:
        raise unavailable("the engine is not ready; try again later")
    return verdict
