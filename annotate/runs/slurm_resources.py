"""What a Slurm job asks for: the deployment's settings (PAIRWISE_SLURM_*), with a run config's `slurm:` mapping
over them. Every value is checked by its pattern before it becomes an #SBATCH line, and a run may set only the
keys of RUN_KEYS: extra sbatch options come from the deployment's settings alone. Standard library only, so that
settings.py checks the deployment's values at startup with the same rules."""

from __future__ import annotations

import re
import shlex

# A run config's slurm: keys, in the order of the #SBATCH lines, and their sbatch options.
RUN_KEYS = {"partition": "--partition", "account": "--account", "nodes": "--nodes",
            "gpus_per_node": "--gpus-per-node", "cpus_per_task": "--cpus-per-task", "mem": "--mem", "time": "--time"}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MEM = re.compile(r"[0-9]{1,9}[KMGT]?")
# Slurm's time limits: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]].
TIME = re.compile(r"[0-9]{1,6}(:[0-9]{2}){0,2}|[0-9]{1,3}-[0-9]{1,2}(:[0-9]{2}){0,2}")
COUNTS = {"nodes": (1, 1024), "gpus_per_node": (0, 64), "cpus_per_task": (1, 1024)}
TEXTS = {"partition": (NAME, "a partition name (letters, digits, _ . -)"),
         "account": (NAME, "an account name (letters, digits, _ . -)"),
         "mem": (MEM, "a memory size such as 16G or 4000M"),
         "time": (TIME, "a time limit such as 90, 04:00:00 or 1-12:00:00")}
# What an extra option may look like, and the options the app writes itself (the job's name, log and folder, and
# the resources above: those are settings of their own).
EXTRA_OPTION = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=+@%/-]+)?")
SET_BY_APP = ("--job-name", "--output", "--error", "--chdir", "--parsable", "--wrap", "--dependency",
              *RUN_KEYS.values(), "--gpus", "--cpus-per-gpu", "--mem-per-cpu", "--ntasks", "--ntasks-per-node")


class SlurmSettingError(ValueError):
    """A resource value that cannot become an #SBATCH line; its message is one line naming it."""


def resource_value(key: str, value, where: str) -> int | str:
    """`value` checked for `key` ("" leaves an optional text setting to the cluster's default)."""
    if key in COUNTS:
        least, most = COUNTS[key]
        # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
        number = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
        if isinstance(number, bool) or not isinstance(number, int) or not least <= number <= most:
            raise SlurmSettingError(f"{where} must be a whole number from {least} to {most}, got {str(value)[:40]!r}")
        return number
    pattern, shape = TEXTS[key]
    text = "" if value is None else value
    if not isinstance(text, str) or (text and not pattern.fullmatch(text)):
        raise SlurmSettingError(f"{where} must be {shape}, got {str(value)[:40]!r}")
    return text


def extra_options(text: str, where: str) -> list[str]:
    """The deployment's extra sbatch options (one string, split like a shell would), each `--name[=value]`."""
    try:
        options = shlex.split(text or "")
    except ValueError as error:
        raise SlurmSettingError(f"{where}: {error}") from None
    for option in options:
        if not EXTRA_OPTION.fullmatch(option):
            raise SlurmSettingError(f"{where}: {option[:60]!r} is not an sbatch option of the form --name or "
                                    "--name=value")
        if option.split("=", 1)[0] in SET_BY_APP:
            raise SlurmSettingError(f"{where}: {option.split('=', 1)[0]} is set by the app (the resources have "
                                    "settings of their own: docs/deploy.md, \"A Slurm cluster\")")
    return options


def run_overrides(config: dict, backend: str) -> dict:
    """A run config's `slurm:` mapping, checked: only RUN_KEYS, each value by its pattern, and only on backend
    slurm. {} when the config has none."""
    overrides = config.get("slurm")
    if overrides is None:
        return {}
    if backend != "slurm":
        raise SlurmSettingError(f"config: slurm: sets a Slurm job's resources, and this run's backend is {backend}; "
                                "remove it or launch on backend slurm")
    if not isinstance(overrides, dict):
        raise SlurmSettingError("config: slurm must be a mapping such as {partition: cpu, cpus_per_task: 4}")
    checked = {}
    for key, value in overrides.items():
        if key not in RUN_KEYS:
            extra = (" (extra sbatch options are the deployment's: PAIRWISE_SLURM_EXTRA_OPTIONS)"
                     if str(key).startswith("-") or key in ("extra_options", "options") else "")
            raise SlurmSettingError(f"config: slurm.{str(key)[:40]} is not a job resource a run may set; slurm takes "
                                    f"{', '.join(RUN_KEYS)}{extra}")
        checked[key] = resource_value(key, value, f"config: slurm.{key}")
    return checked


def job_resources(deployment: dict, overrides: dict) -> list[tuple[str, int | str, str]]:
    """(key, value, where it comes from) for every RUN_KEYS key: the run's value, else the deployment's."""
    return [(key, overrides[key], "this run") if key in overrides else (key, deployment[key], "deployment")
            for key in RUN_KEYS]


def sbatch_options(resources: list[tuple[str, int | str, str]], *, gpus: bool = True) -> list[str]:
    """The sbatch options of the resources: an empty text is left to the cluster; 0 GPUs (or gpus=False, a CPU
    stage) writes no GPU option at all, which a cluster without GPUs would refuse."""
    options = []
    for key, value, _ in resources:
        if value == "" or (key == "gpus_per_node" and (value == 0 or not gpus)):
            continue
        options.append(f"{RUN_KEYS[key]}={value}")
    return options
