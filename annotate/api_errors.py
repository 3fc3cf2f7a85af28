"""API errors as one readable line: {"detail": "what is wrong and how to fix it"} plus field details."""

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
        response.data = {"detail": "; ".join(lines), "errors": response.data}
    return response
