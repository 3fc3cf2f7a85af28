"""A WSGI app that answers with the process id of the gunicorn worker serving it, so a test can tell the
workers apart (test_balanced_worker.py); `?sleep=S` holds the request S seconds first, keeping a thread busy."""

import os
import time
from urllib.parse import parse_qs


def application(environ, start_response):
    sleep = parse_qs(environ.get("QUERY_STRING", "")).get("sleep")
    if sleep:
        time.sleep(float(sleep[0]))
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
