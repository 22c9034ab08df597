"""What the harness's HTTP services (grading, rollout, viewer) share: one refusal, one token
check, JSON errors and a request-body limit. The name proxies (http.server) share the refusal.

Every error a service answers is ``{"error": "..."}`` naming the fix, never a traceback:

- :class:`Refused` raised anywhere in a handler is answered with its status, message and
  headers;
- a body that does not validate is a 400 with the service's own example (``bad_body``);
- Starlette's own errors (404, 405) keep their status, as JSON;
- anything else is a bug of the service: a JSON 500 naming the exception's type, the
  traceback on the service's stderr.
"""

from __future__ import annotations

import hmac
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

# FastAPI is imported where used: the name proxy shares Refused and starts without it.
if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse


class Refused(Exception):
    """A refused request: the status and the message (naming the fix) to answer."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def token_matches(given: str, token: str) -> bool:
    """``given`` equals ``token``, compared in constant time (bytes: a non-ASCII header must
    not raise)."""
    return hmac.compare_digest(given.strip().encode(), token.encode())


def require_bearer(request: Request, token: str, variable: str) -> None:
    """Raise :class:`Refused` (401, naming the environment variable that holds the token)
    unless the request carries ``Authorization: Bearer <token>``."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token_matches(given, token):
        raise Refused(
            401, f"missing or wrong token: send the header 'Authorization: Bearer ${variable}'"
        )


def install_errors(
    app: FastAPI,
    service: str,
    bad_body: Callable[[Request], Awaitable[JSONResponse]] | None = None,
    on_refused: Callable[[Request, Refused], Awaitable[JSONResponse]] | None = None,
) -> None:
    """Answer every error of ``app`` as JSON (the module docstring); ``service`` names it in
    a 500's message. A service that must do more (the grading service records refused
    submissions) passes its own ``on_refused``; without ``bad_body`` a bad body is a plain 400."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return error(exc.status, exc.message, exc.headers)

    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if bad_body is None:
            return error(400, "the request body is not what this endpoint takes")
        return await bad_body(request)

    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        traceback.print_exception(exc, file=sys.stderr)
        return error(500, f"internal error of the {service} ({type(exc).__name__}): try again")

    app.add_exception_handler(Refused, on_refused or refused)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, internal)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 before the app
    parses it (with or without a Content-Length header). ``on_refusal(path, status, message)``
    returns the status and message to answer (a service may record the refusal there)."""

    def __init__(
        self,
        app: Any,
        limit: int,
        message: str,
        on_refusal: Callable[[str | None, int, str], Awaitable[tuple[int, str]]] | None = None,
    ) -> None:
        self.app, self.limit, self.message, self.on_refusal = app, limit, message, on_refusal

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = declared is not None and declared.isdigit() and int(declared) > self.limit
        body, more = b"", not too_big
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            too_big = len(body) > self.limit
            more = message.get("more_body", False) and not too_big
        if too_big:
            status, text = 413, f"request body over {self.limit} bytes: {self.message}"
            if self.on_refusal is not None:
                status, text = await self.on_refusal(scope.get("path"), status, text)
            await error(status, text)(scope, receive, send)
            return
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
