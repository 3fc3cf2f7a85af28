"""Dependencies come in extras so that a web host installs no torch (that the web app never imports the
training stack is checked in test_import_boundaries.py), and the README's install still installs everything."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> set[str]:
    return {requirement.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
            for requirement in requirements}


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
