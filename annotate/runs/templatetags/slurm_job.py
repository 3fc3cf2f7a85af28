"""{% slurm_job run %}: the run page's card of a Slurm run: what its job asks for (the deployment's settings and the
run's slurm: mapping), each job's state with Slurm's reason as the app last read them, and the Resume button of a
staged run whose chain stopped, when it can go on (annotate/runs/slurm.py resume_refusal)."""

from pathlib import Path

from django import template

from annotate.runs.models import Run
from annotate.runs.slurm import ended_job_states, job_record, resume_refusal, run_resources
from annotate.runs.slurm_resources import RUN_KEYS, SlurmSettingError

register = template.Library()


def _shown(key: str, value) -> str:
    if key == "gpus_per_node" and value == 0:
        return "none"
    return "the cluster's default" if value == "" else str(value)


def resume_from(run: Run) -> str:
    """The version a Resume would go on from ("v0003"), or "" when the run cannot be resumed."""
    from training.grpo.versions import latest_version, version_name

    if not run.finished or resume_refusal(run) is not None:
        return ""
    return version_name(latest_version(Path(run.folder)))


@register.inclusion_tag("runs/_slurm_job.html", takes_context=True)
def slurm_job(context, run: Run) -> dict:
    record = job_record(run)
    resources, error = record.get("resources"), ""
    if not resources:  # not submitted yet: what it will ask for
        try:
            resources = run_resources(run)
        except SlurmSettingError as mistake:
            resources, error = [], str(mistake)
    rows = [{"option": RUN_KEYS.get(key, key), "value": _shown(key, value), "source": source}
            for key, value, source in resources]
    jobs = ended_job_states(run) if run.finished else record.get("jobs") or []
    return {"csrf_token": context.get("csrf_token"), "resume_from": resume_from(run), "run": run, "rows": rows, "error": error, "extra_options": record.get("extra_options") or [],
            "python": record.get("python"), "jobs": jobs, "submitted": bool(record.get("resources")),
            "pending": [job for job in jobs if job.get("state") == "PENDING"]}
