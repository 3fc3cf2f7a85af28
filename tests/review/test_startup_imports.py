"""The review app's commands (import_items, add_user, create_project, expire_assignments, ...) import the
review app's modules: they must start without SciPy's statistics, which alone took a second of CPU per
command. (The agreement report and the dashboard load them where they are used.)"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REVIEW_IMPORT = """
import sys
import django
django.setup()
import annotate.review.assignments, annotate.review.judgments, annotate.review.projects, annotate.review.users
import annotate.review.import_sql, annotate.review.importing
heavy = sorted(name for name in ("scipy.stats", "scipy.sparse", "statsmodels", "torch") if name in sys.modules)
print("loaded:", ",".join(heavy) or "none")
"""


def test_the_review_modules_start_without_scipy_statistics(tmp_path):
    result = subprocess.run([sys.executable, "-c", REVIEW_IMPORT], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin", "PAIRWISE_DATA_DIR": str(tmp_path),
                                              "DJANGO_SETTINGS_MODULE": "annotate.settings"})
    assert result.stdout.strip() == "loaded: none", result.stdout + result.stderr[-2000:]
