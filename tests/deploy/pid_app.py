"""A WSGI app that answers with the process id of the gunicorn worker serving it, so a test can tell the
workers apart (test_balanced_worker.py); `?sleep=S` holds the request S seconds first, keeping a thread busy, and
`&started=PATH` creates the file PATH as it starts, so that the test knows a thread has the request."""

import os
import time
from pathlib import Path
from urllib.parse import parse_qs


def application(environ, start_response):
    query = parse_qs(environ.get("QUERY_STRING", ""))
    if started := query.get("started"):
        Path(started[0]).touch()
    if sleep := query.get("sleep"):
        time.sleep(float(sleep[0]))
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
