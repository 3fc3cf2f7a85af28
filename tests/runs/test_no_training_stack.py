"""Web and worker processes never import the training stack: a run is checked, started and followed
through `python -m training` subprocesses only."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_runs_app_its_pages_api_and_tasks_load_without_torch_or_transformers(tmp_path):
    probe = (
        "import sys, django; django.setup()\n"
        "import annotate.urls, annotate.celery, annotate.runs.tasks, annotate.runs.views, annotate.runs.api\n"
        "import annotate.runs.audit, annotate.runs.compare, annotate.runs.slurm\n"
        "heavy = sorted({name.split('.')[0] for name in sys.modules} & {'torch', 'transformers', 'trl', 'datasets'})\n"
        "print(','.join(heavy) or 'none')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"DJANGO_SETTINGS_MODULE": "annotate.settings", "PATH": "/usr/bin:/bin",
                               "PAIRWISE_DATA_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "none"
