"""gunicorn settings for Pairwise: `gunicorn -c deploy/gunicorn.conf.py annotate.wsgi:application`.

Threads per worker overlap the time a request waits on PostgreSQL (row locks, commit flushes);
workers use the cores. Everything can be overridden from the environment.
"""

import multiprocessing
import os
import sys

import gunicorn

bind = os.environ.get("PAIRWISE_BIND", "127.0.0.1:8000")
# One worker a core: a worker's threads share its interpreter lock, and the cores also run PostgreSQL.
workers = int(os.environ.get("PAIRWISE_WORKERS", max(2, multiprocessing.cpu_count())))
# A reviewer request waits on PostgreSQL part of its time (row locks, commit flushes), which a few threads
# overlap; more threads than that only queue on the worker's interpreter lock. At 32 reviewers, 2 workers of 4
# threads, each holding half the connections, answered `next` with a p99 about 35-45% lower than 3 workers of 8
# at the same rate (bench/review_load.py, docs/benchmarks/review_load.md).
threads = int(os.environ.get("PAIRWISE_THREADS", 4))
# Connections a worker holds at once. A kept-alive connection stays with the worker that accepted it, so
# without a bound one worker can hold most of the clients and queue them behind its threads while another
# idles. A full worker hands a connection over to a waiting client (annotate/gunicorn_worker.py). gunicorn
# keeps at most this less `threads` of them idle between requests (12): past that, answers close theirs.
# That worker subclasses gunicorn's own threaded one and reads its internals, so it is used with the
# gunicorn versions it was written for. Any other runs gunicorn's threaded worker with gunicorn's own bound:
# without the hand-over, a bound of 16 would leave clients past it waiting for a kept-alive connection to end.
BALANCED_WORKER_GUNICORN = ((27,), (28,))
if BALANCED_WORKER_GUNICORN[0] <= gunicorn.version_info < BALANCED_WORKER_GUNICORN[1]:
    worker_class = "annotate.gunicorn_worker.BalancedThreadWorker"
    worker_connections = int(os.environ.get("PAIRWISE_WORKER_CONNECTIONS", 16))
else:
    worker_class = "gthread"
    worker_connections = int(os.environ.get("PAIRWISE_WORKER_CONNECTIONS", 1000))
    print(f"gunicorn {gunicorn.__version__}: Pairwise's balanced worker was written for gunicorn 27; using "
          "gunicorn's gthread worker, which may queue clients on one worker while another idles", file=sys.stderr)
backlog = 2048
keepalive = 5
# Recycle workers now and then, so a slow leak in any library never grows without bound.
max_requests = 20000
max_requests_jitter = 2000
accesslog = os.environ.get("PAIRWISE_ACCESS_LOG") or None
loglevel = os.environ.get("PAIRWISE_LOG_LEVEL", "warning")
