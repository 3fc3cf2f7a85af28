"""gunicorn settings for Pairwise: `gunicorn -c deploy/gunicorn.conf.py annotate.wsgi:application`.

Threads per worker overlap the time a request waits on PostgreSQL (row locks, commit flushes);
workers use the cores. Everything can be overridden from the environment.
"""

import multiprocessing
import os

bind = os.environ.get("PAIRWISE_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("PAIRWISE_WORKERS", max(2, multiprocessing.cpu_count() + 1)))
worker_class = "gthread"
# A reviewer request spends most of its time waiting on PostgreSQL: with 4 threads per worker the
# 2-core bench machine sat 20% idle at 190 judgments/s; with 8 it reached 230-250 (bench/review_load.py).
threads = int(os.environ.get("PAIRWISE_THREADS", 8))
backlog = 2048
keepalive = 5
# Recycle workers now and then, so a slow leak in any library never grows without bound.
max_requests = 20000
max_requests_jitter = 2000
accesslog = os.environ.get("PAIRWISE_ACCESS_LOG") or None
loglevel = os.environ.get("PAIRWISE_LOG_LEVEL", "warning")
