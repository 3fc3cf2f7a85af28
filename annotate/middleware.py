"""Middleware: login for pages, health probes, JSON errors under /api/, request body limits, no caching
of what is private, the content security policy."""

import logging
import uuid

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpResponse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from annotate import api_errors, health, limits

logger = logging.getLogger(__name__)


class PagesNeedLoginMiddleware(LoginRequiredMiddleware):
    """Django's LoginRequiredMiddleware for pages; the API answers 401/403 itself.

    DRF authenticates tokens inside the view, after middleware has run, so API paths are left to
    DRF's own permission classes (which default to IsAuthenticated).
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class HealthzMiddleware:
    """GET /healthz: the database and the broker, answered before anything checks the host or the scheme."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info == "/healthz" and request.method in ("GET", "HEAD"):
            return health.health_response()
        return self.get_response(request)


class NoStoreMiddleware:
    """Cache-Control: no-store (Django's never-cache headers) on every API answer and on every answer to a
    logged-in user: no browser cache or proxy keeps a reviewer's pair, a dashboard or an export. Static
    files stay cacheable: WhiteNoise answers them before authentication, so no user is known."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        user = getattr(request, "user", None)  # absent when a middleware answered before authentication
        if api_errors.is_api(request) or (user is not None and user.is_authenticated):
            add_never_cache_headers(response)
        return response


class ApiErrorsMiddleware:
    """Under /api/ every error is one JSON line: an HTML error from outside DRF (an unknown path, a bad
    host) is answered as JSON, and an unhandled exception is logged with a request id that the 500 gives
    back (also as X-Request-ID); a database that does not answer is 503 with Retry-After."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not api_errors.is_api(request):
            return self.get_response(request)
        request.pairwise_request_id = uuid.uuid4().hex
        response = self.get_response(request)
        response = api_errors.as_json_error(request, response, request.pairwise_request_id)
        response["X-Request-ID"] = request.pairwise_request_id
        return response

    def process_exception(self, request, exception):
        if not api_errors.is_api(request):
            return None
        request_id = getattr(request, "pairwise_request_id", None) or uuid.uuid4().hex
        if isinstance(exception, OperationalError | InterfaceError):
            # The database is down or dropped the connection (a restart, a failover): not a bug, and the
            # client can send again; the connection is replaced at the end of the request.
            logger.warning("request %s: %s %s: database unavailable: %s", request_id, request.method,
                           request.path_info, exception)
            return api_errors.database_unavailable(request, request_id)
        if isinstance(exception, DataError):
            logger.warning("request %s: %s %s: value refused by the database: %s", request_id, request.method,
                           request.path_info, exception)
            return api_errors.unstorable_value(request, request_id)
        logger.error("request %s: %s %s failed", request_id, request.method, request.path_info, exc_info=exception)
        return api_errors.server_error(request, request_id)


class RequestBodyLimitMiddleware:
    """413 for a body over its limit (annotate/limits.py: body_too_large), on every path, before
    anything reads it (the CSRF check reads a page's form): JSON under /api/, a page with the way back to
    the form elsewhere."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        message = limits.body_too_large(request)
        if message is None:
            return self.get_response(request)
        if api_errors.is_api(request):
            return api_errors.json_error(message, 413)
        page = format_html('<!doctype html><meta charset="utf-8"><title>Too large</title><p>{}.</p>'
                           '<p><a href="{}">Back to the form</a></p>', message, request.path)
        return HttpResponse(page, status=413)


class ContentSecurityPolicyMiddleware:
    """One fixed policy for every response (settings.PAIRWISE_CONTENT_SECURITY_POLICY): no nonces, so
    pages stay cacheable and templates need nothing; the pages' scripts and styles are static files."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", settings.PAIRWISE_CONTENT_SECURITY_POLICY)
        return response
