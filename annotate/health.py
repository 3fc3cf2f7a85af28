"""/healthz: does the database answer, does the broker answer.

`{"status": "ok"|"unavailable", "database": "ok"|"unavailable", "broker": "ok"|"unavailable"|"not configured"}`,
200 when everything configured answers, 503 otherwise. No login: probes (compose, a load balancer,
Kubernetes) have none. What went wrong is logged on the server, never put in the answer, since error
messages can carry host names, user names or URLs with passwords.
"""

import logging

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_S = 3


def database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.warning("health check: the database does not answer", exc_info=True)
        connection.close()  # a broken connection must not be handed to the next request
        return "unavailable"
    return "ok"


def broker_status() -> str:
    if settings.CELERY_BROKER_URL == settings.EMBEDDED_BROKER_URL:
        return "not configured"  # embedded: tasks run in-process
    from annotate.celery import app

    try:
        with app.connection_for_write(connect_timeout=BROKER_TIMEOUT_S) as broker:
            broker.ensure_connection(max_retries=0, timeout=BROKER_TIMEOUT_S)
    except Exception:
        logger.warning("health check: the broker does not answer", exc_info=True)
        return "unavailable"
    return "ok"


def health_response() -> JsonResponse:
    parts = {"database": database_status(), "broker": broker_status()}
    healthy = all(state in ("ok", "not configured") for state in parts.values())
    response = JsonResponse({"status": "ok" if healthy else "unavailable", **parts}, status=200 if healthy else 503)
    response["Cache-Control"] = "no-store"
    return response
