"""gunicorn settings for Pairwise: `gunicorn -c deploy/gunicorn.conf.py annotate.wsgi:application`.

Threads per worker overlap the time a request waits on PostgreSQL (row locks, commit flushes);
workers use the cores. Everything can be overridden from the environment.
"""

import multiprocessing
import os

bind = os.environ.get("PAIRWISE_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("PAIRWISE_WORKERS", max(2, multiprocessing.cpu_count() + 1)))
worker_class = "gthread"
threads = int(os.environ.get("PAIRWISE_THREADS", 4))
backlog = 2048
keepalive = 5
# Recycle workers now and then, so a slow leak in any library never grows without bound.
max_requests = 20000
max_requests_jitter = 2000
accesslog = os.environ.get("PAIRWISE_ACCESS_LOG") or None
loglevel = os.environ.get("PAIRWISE_LOG_LEVEL", "warning")
