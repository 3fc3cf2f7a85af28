"""API errors as one readable line: {"detail": "what is wrong and how to fix it"} plus field details.

Errors from DRF's views go through `one_line_exception_handler`; whatever answers an /api/ request
before or after them (an unknown path, a body too large, an unhandled exception) goes through the
helpers below, used by annotate.middleware.ApiErrorsMiddleware. Either way it is JSON, never HTML.
"""

import logging
from http import HTTPStatus

from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from annotate.errors import UserMistake


def _flatten(errors, prefix: str = "") -> list[str]:
    if isinstance(errors, dict):
        lines = []
        for key, value in errors.items():
            name = key if key != "non_field_errors" else ""
            lines += _flatten(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
        return lines
    if isinstance(errors, list):
        lines = []
        for item in errors:
            lines += _flatten(item, prefix)
        return lines
    return [f"{prefix}: {errors}" if prefix else str(errors)]


def one_line_exception_handler(exc, context):
    if isinstance(exc, UserMistake):
        return Response({"detail": str(exc)}, status=exc.status)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError) and not (
        isinstance(response.data, dict) and "detail" in response.data
    ):
        lines = _flatten(response.data)
        response.data = {"detail": "; ".join(lines), "errors": _with_text_keys(response.data)}
    return response


def _with_text_keys(errors):
    """A list field's errors are keyed by item index (an int), which JSON cannot hold as a key."""
    if isinstance(errors, dict):
        return {str(key): _with_text_keys(value) for key, value in errors.items()}
    if isinstance(errors, list):
        return [_with_text_keys(item) for item in errors]
    return errors


# --- errors raised outside DRF's views: unknown paths, bodies too large, unhandled exceptions ---------

API_PREFIX = "/api/"
MAX_ID = 2**63 - 1  # ids are PostgreSQL bigints

logger = logging.getLogger(__name__)


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def json_error(message: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"detail": message, **extra}, status=status)


# How long a client should wait before sending again when the database does not answer: a restart or a
# failover takes seconds.
DATABASE_RETRY_AFTER_SECONDS = 2


def database_unavailable(request: HttpRequest, request_id: str) -> JsonResponse:
    """503 with Retry-After when the database is down, restarting or dropped the connection: the client's
    retry is safe (a judgment sent again with its client_key is stored once)."""
    response = json_error(f"the database is not answering right now (request {request_id}); nothing was changed "
                          f"unless a retry says so: try again in {DATABASE_RETRY_AFTER_SECONDS} seconds, sending the "
                          "same body (a judgment keeps its client_key)", 503, request_id=request_id)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def unstorable_value(request: HttpRequest, request_id: str) -> JsonResponse:
    """400 for a value the database refused to hold (text with NUL, a number past a column's range) that no
    check before it caught: the sender's mistake, not the server's; nothing was stored."""
    return json_error("the request holds a value that cannot be stored: text with the NUL character (\\u0000) or "
                      "a number out of range; remove it and send again", 400, request_id=request_id)


def server_error(request: HttpRequest, request_id: str) -> JsonResponse:
    return json_error(f"server error: it is logged as request {request_id}; try again, and if it keeps "
                      "failing give an admin that id", 500, request_id=request_id)


def as_json_error(request: HttpRequest, response: HttpResponse, request_id: str) -> HttpResponse:
    """The same error as one JSON line, when something outside DRF answered an /api/ request with HTML."""
    status = response.status_code
    if status < 400 or response.get("Content-Type", "").startswith("application/json"):
        return response
    if status == 404:
        message = (f"not found: no API endpoint at {request.path_info} (ids are whole numbers from 1 to {MAX_ID}); "
                   "the endpoints are listed in /api/schema/")
    elif status >= 500:
        logger.error("request %s: %s %s answered %s", request_id, request.method, request.path_info, status)
        return server_error(request, request_id)
    else:
        try:
            message = HTTPStatus(status).phrase.lower()
        except ValueError:
            message = f"error {status}"
    converted = json_error(message, status)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            converted[header] = response[header]
    return converted
