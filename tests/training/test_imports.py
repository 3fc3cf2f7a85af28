"""The training package runs on a GPU node with no web stack: no module of it may import one."""

import subprocess
import sys

from .conftest import REPO

CHECK = """
import importlib, pkgutil, sys
import training
names = sorted(m.name for m in pkgutil.walk_packages(training.__path__, "training.")
               if not m.name.endswith("__main__"))
for name in names:
    importlib.import_module(name)
web = sorted(m for m in sys.modules if m.split(".")[0] in {"django", "annotate", "celery", "rest_framework"})
print(len(names), web)
"""


def test_importing_every_training_module_pulls_in_no_web_stack():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    count, web_modules = result.stdout.split(" ", 1)
    assert int(count) >= 8
    assert web_modules.strip() == "[]"
