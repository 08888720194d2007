"""OpenAI-style error envelope: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# The dataset 404 (code dataset_not_found), one helper for the answer service and the routes: a
# NotFound, which the AnswerError handler below answers as a 404 like any APIError.
from app.answers.errors import dataset_not_found
from app.cpu_gate import GateBusy
from app.jsonbody import BodyValueError

__all__ = ["APIError", "dataset_not_found", "duplicate_key_error", "error_body", "install_error_handlers", "validation_error"]

log = logging.getLogger("dpicl.api")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


# app.answers.errors kinds -> HTTP status (499: nginx's "client closed request", logged, never seen).
ANSWER_STATUS = {"invalid": 422, "not_found": 404, "forbidden": 403, "conflict": 409,
                 "budget_exhausted": 429, "client_gone": 499}


class APIError(Exception):
    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type or _TYPES.get(status_code, "api_error")
        self.param = param
        self.code = code
        self.headers = headers


def gate_busy(exc: GateBusy) -> "APIError":
    """A full ``app.cpu_gate.CpuGate`` (the audit planner): nothing ran for this request; retry later."""
    return APIError(503, str(exc), code="planner_busy", headers={"Retry-After": str(exc.retry_after)})


# An error names what was wrong, and may quote the caller's own value (a mechanism name, a field name): quoted at
# most this long, so a 1 MiB body cannot come back as a 1 MiB error (the red team's 60 KB mechanism name did).
MAX_MESSAGE_CHARS, MAX_PARAM_CHARS = 2000, 200


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": _clip(message, MAX_MESSAGE_CHARS), "type": type,
                      "param": None if param is None else _clip(param, MAX_PARAM_CHARS), "code": code}}


_LOCATIONS = ("body", "query", "path", "header", "cookie")


def _loc_to_param(loc: tuple, located: bool) -> str | None:
    # FastAPI's errors start with where the value came from (("body", "query") is the body's field
    # `query`); a plain pydantic error starts with the field. Only that first element is dropped: a field
    # named `query` (the private answers' question) or `path` is a field like any other.
    parts = [str(p) for p in (loc[1:] if located and loc[:1] and loc[0] in _LOCATIONS else loc)]
    return ".".join(parts) if parts else None


def _validation_message(err: dict) -> str:
    # Only pydantic's message, never its ``input``: a rejected body may hold private exemplar text.
    return str(err.get("msg", "invalid value")).removeprefix("Value error, ")


def _param_and_message(err: dict, prefix: str = "", located: bool = False) -> tuple[str | None, str]:
    raw_loc = tuple(err.get("loc", ()))
    if err.get("type") == "json_invalid":
        # FastAPI's loc is ("body", <character offset>): the offset is no field. json's reason names no text.
        where = raw_loc[1] if len(raw_loc) > 1 else "?"
        return f"{prefix}body", f"not valid JSON: {(err.get('ctx') or {}).get('error', 'parse error')} (character {where})"
    loc = _loc_to_param(raw_loc, located)
    msg = _validation_message(err)
    if not loc:
        # Model-level validators name their field first: "labels: required for ..."
        head, sep, rest = msg.partition(":")
        if sep and head.replace("_", "").replace(".", "").isalnum():
            loc, msg = head, rest.strip()
    if loc:
        param: str | None = f"{prefix}{loc}"
    elif prefix:
        param = prefix.rstrip(".")
    else:  # the body as a whole (not an object, or not JSON: a text/plain body)
        param = "body" if located and raw_loc[:1] == ("body",) else None
    return param, msg


# FastAPI's 400 for a body it could not decode (bytes that are not UTF-8, a gzip body, nesting past the
# recursion limit): answered as the 422 every other unparseable body gets (tests/api/test_unparseable_body.py).
_FASTAPI_PARSE_ERROR = "There was an error parsing the body"


def json_error_reason(exc: BaseException | None, *, in_line: bool = False) -> str:
    """Why a body is not JSON, in json's own fixed words and a position, never the body's text."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} ({f'column {exc.colno}' if in_line else f'character {exc.pos}'})"
    return "it could not be decoded"


def _parse_error(exc: BaseException) -> APIError:
    cause = exc.__cause__
    if isinstance(cause, BodyValueError):  # app.api.json_route: {"epsilon": 1, "epsilon": 100}
        return duplicate_key_error(cause)
    return APIError(422, f"body: not valid JSON: {json_error_reason(cause)}", param="body", code="invalid_value")


def duplicate_key_error(exc: BodyValueError, message_prefix: str = "") -> APIError:
    """A repeated key or a non-finite number in a JSON body (app.jsonbody.loads): a 422 naming it."""
    return APIError(422, f"{message_prefix}{exc}", param=exc.param, code=exc.code)


def validation_error(errors: list[dict], prefix: str = "", *, located: bool = False) -> APIError:
    """A 422 APIError from pydantic errors; ``param`` is the first offending field's dotted path.
    ``located``: FastAPI's errors, whose ``loc`` starts with body / query / path / header."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param, _ = _param_and_message(first, prefix, located)
    parts = []
    for e in errors[:10]:
        p, m = _param_and_message(e, prefix, located)
        parts.append(f"{p or 'body'}: {m}")
    return APIError(422, "; ".join(parts), param=param, code="invalid_value")


def _flat_routes(routes):
    """The concrete routes, through FastAPI's lazily included routers (``effective_candidates``)."""
    for r in routes:
        if hasattr(r, "effective_candidates"):
            yield from _flat_routes(r.effective_candidates())
        else:
            yield r


def allowed_methods(req: Request) -> list[str]:
    """Every method a route serves on this request's path. A literal route wins over a templated
    one, as in the OpenAPI document: /v1/audits/plan (POST) is not /v1/audits/{job_id} (GET)."""
    from starlette._utils import get_route_path

    path = get_route_path(req.scope)
    found: dict[str, int] = {}
    for r in _flat_routes(req.app.router.routes):
        regex, methods = getattr(r, "path_regex", None), getattr(r, "methods", None)
        if regex is None or not methods or not regex.match(path):
            continue
        n = len(getattr(r, "param_convertors", None) or {})
        for m in methods:
            found[m] = min(n, found.get(m, n))
    if not found:
        return []
    fewest = min(found.values())
    return sorted(m for m, n in found.items() if n == fewest)


DATABASE_UNAVAILABLE = ("the database did not answer; retry shortly. A private answer is released only after its "
                        "charge commits, so none was released; whether its charge was made is not known: retry "
                        "with the same Idempotency-Key to be charged at most once")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_req: Request, exc: APIError):
        return JSONResponse(
            error_body(exc.message, exc.type, exc.param, exc.code), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError):
        err = validation_error(list(exc.errors()), located=True)
        return JSONResponse(error_body(err.message, err.type, err.param, err.code), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and exc.detail == _FASTAPI_PARSE_ERROR:
            bad = _parse_error(exc)
            return JSONResponse(error_body(bad.message, bad.type, bad.param, bad.code), status_code=422)
        message = exc.detail if isinstance(exc.detail, str) else "error"
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 404 and message == "Not Found":
            message = "no such route"
        if exc.status_code == 405:
            # Starlette names only the first matching route's methods; a path served by several
            # routes (GET and POST /v1/datasets) must list them all (RFC 9110 section 15.5.6).
            allowed = allowed_methods(req)
            headers["Allow"] = ", ".join(allowed)
            message = f"method {req.method} is not allowed here; allowed: {', '.join(allowed)}"
        return JSONResponse(
            error_body(message, _TYPES.get(exc.status_code, "api_error"), None, "method_not_allowed"
                       if exc.status_code == 405 else None),
            status_code=exc.status_code,
            headers=headers or None,
        )

    from app.answers.errors import AnswerError, BudgetExhaustedError

    @app.exception_handler(AnswerError)
    async def _answer_error(_req: Request, exc: AnswerError):
        # The service's refusals (app/answers/errors.py) in HTTP terms.
        status = ANSWER_STATUS.get(exc.kind, 422)
        headers = None
        if isinstance(exc, BudgetExhaustedError):
            headers = {"X-DPICL-Epsilon-Spent": f"{exc.epsilon_spent:.6g}",
                       "X-DPICL-Epsilon-Remaining": f"{exc.epsilon_remaining:.6g}"}
        return JSONResponse(error_body(exc.message, _TYPES.get(status, "api_error"), exc.param, exc.code),
                            status_code=status, headers=headers)

    from app.llm.errors import CapabilityError
    from app.llm.remote import RemoteError, RemoteTimeout
    from app.llm.scheduler import DeadlineExceeded, Overloaded

    @app.exception_handler(Overloaded)
    async def _overloaded(req: Request, exc: Overloaded):
        # The model's queue was full (or the request waited past its deadline): no model work was
        # done for it and nothing was charged; the client may retry after Retry-After seconds.
        stale = isinstance(exc, DeadlineExceeded)
        return JSONResponse(
            error_body(str(exc), "api_error", None, "deadline_exceeded" if stale else "model_overloaded"),
            status_code=503, headers={"Retry-After": str(exc.retry_after)},
        )

    @app.exception_handler(CapabilityError)
    async def _capability(_req: Request, exc: CapabilityError):
        return JSONResponse(error_body(str(exc), "invalid_request_error", "model", "capability_missing"),
                            status_code=422)

    @app.exception_handler(RemoteError)
    async def _remote(req: Request, exc: RemoteError):
        # The model server behind a remote backend failed: the gateway's upstream, not the caller. Its own
        # words stay out (``exc.public``): they can quote a prompt that holds exemplars, or count its tokens.
        timeout = isinstance(exc, RemoteTimeout)
        log.warning("model server error on %s %s: %s", req.method, req.url.path, type(exc).__name__)
        return JSONResponse(
            error_body(f"the model server {'timed out' if timeout else 'failed'}: {exc.public}", "api_error", None,
                       "upstream_timeout" if timeout else "upstream_error"),
            status_code=504 if timeout else 502,
        )

    from sqlalchemy.exc import DisconnectionError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    async def _database_unavailable(req: Request, exc: Exception):
        # The database refused, dropped or timed out (PostgreSQL down or restarting, a connection cut, a
        # deadlock or serialization failure; SQLite locked past its busy timeout; the pool exhausted):
        # the server's dependency, not the caller's input, and worth a retry. The class names only: an
        # error's text can quote the statement.
        orig = getattr(exc, "orig", None)
        log.warning("database unavailable on %s %s: %s%s", req.method, req.url.path, type(exc).__name__,
                    f" ({type(orig).__name__})" if orig is not None else "")
        return JSONResponse(error_body(DATABASE_UNAVAILABLE, "service_unavailable", None, "database_unavailable"),
                            status_code=503, headers={"Retry-After": "1"})

    for db_error in (OperationalError, DisconnectionError, PoolTimeout):
        app.add_exception_handler(db_error, _database_unavailable)

    @app.exception_handler(Exception)
    async def _unhandled(req: Request, exc: Exception):
        log.exception("unhandled error on %s %s", req.method, req.url.path)
        return JSONResponse(error_body("internal server error", "api_error", None, "internal_error"), status_code=500)
