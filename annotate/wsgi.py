import gc
import os
import sys

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
application = get_wsgi_application()
# Import every view (and the statistics libraries behind them) now, while the worker starts, rather than
# inside its first request, where it would stall every request queued behind it for seconds.
get_resolver().url_patterns  # noqa: B018 (the access is the point: it imports)
# Embedded mode has no beat: the server's own process follows runs when nobody looks (docs/runs.md). Only a
# server (runserver, gunicorn) starts it; a test or a script importing this module does not.
if sys.argv[1:2] == ["runserver"] or "gunicorn" in sys.argv[0]:  # gunicorn, or python -m gunicorn
    from annotate.runs.sweeps import sweeps_start_in_process

    sweeps_start_in_process()
# What is loaded by now lives as long as the worker. Frozen, it is left out of the collector's full
# passes: over ~170,000 objects each pass stalled whichever request was running for 30-80 ms.
gc.freeze()
