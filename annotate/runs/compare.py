"""Compare checkpoints: answers sampled from two or more checkpoints on a prompt set, imported into a
project as a new review batch. Reviewers see the pairs as any others (model names hidden), so the same
reviewers and the Bradley-Terry leaderboard compare, say, an SFT parent with its DPO and GRPO children.

A comparison is a Run of kind "sample": the worker runs `python -m training sample` (nothing here imports
the training stack), and once it has written its import file, the review app's own import service stores
it (all or nothing, every error as `line N: reason`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, whole_number
from annotate.review.import_sql import items_import_file
from annotate.review.importing import ImportRejected
from annotate.review.models import Project
from annotate.runs.checkpoints import local_checkpoints
from annotate.runs.input_paths import input_path
from annotate.runs.models import Run
from annotate.runs.queue import generation_engine_checked, queue_checkpoints_run
from annotate.runs.task_sets import task_set_resolve
from training.atomic_write import write_text_atomic

ITEMS_FILE = "items.jsonl"
MAX_PROJECT_PROMPTS = 500  # a comparison samples every prompt from every checkpoint: keep a project's batch bounded


def project_prompts_file(project: Project) -> Path:
    """A project's prompts as a prompts file (prompt_id, prompt), kept under the inputs folder by content, so a
    comparison reads the prompts as they were when it was launched."""
    rows = [{"prompt_id": external_id, "prompt": messages} for external_id, messages in
            project.prompts.order_by("external_id").values_list("external_id", "messages")[:MAX_PROJECT_PROMPTS]]
    if not rows:
        raise UserMistake(f"project {project.slug} has no prompts to sample answers to; import some first")
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    path = Path(settings.INPUTS_ROOT) / "prompts" / f"{project.slug}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    return path


def _prompts_path(*, prompts: str | None, task_set, prompts_project: str | None) -> Path:
    """Where the prompts come from: a project's prompts, a task set, or (through the API) a file's path."""
    given = [name for name, value in (("prompts", prompts), ("task_set", task_set),
                                      ("prompts_project", prompts_project)) if value]
    if len(given) != 1:
        raise UserMistake("give the prompts once: a project's prompts (prompts_project), a task set (task_set) or a "
                          f"prompts file (prompts){'; got ' + ', '.join(given) if given else ''}")
    if prompts_project:
        source = Project.objects.filter(slug=prompts_project).first()
        if source is None:
            raise UserMistake(f"no project {prompts_project!r} to take prompts from")
        return project_prompts_file(source)
    if task_set:
        return input_path("tasks", task_set_resolve(task_set).path)
    path = input_path("prompts", prompts)
    if not path.is_file():
        raise UserMistake(f"prompts {prompts} is not a file; give a JSONL file of prompt_id and prompt lines")
    return path


def compare_launch(*, checkpoints: list, project: str, prompts: str | None = None, task_set=None,
                   prompts_project: str | None = None, temperature: float = 0.7, max_new_tokens: int = 256,
                   seed: int = 0, engine: str = "transformers", launched_by: AbstractBaseUser | None = None,
                   enqueue: bool = True) -> Run:
    """Check a comparison and queue it as a sample run; `engine` samples with transformers or vLLM."""
    chosen = local_checkpoints(checkpoints, at_least=2, purpose="compare")
    target = Project.objects.filter(slug=project).first()
    if target is None:
        raise UserMistake(f"no project {project!r}; the answers are imported into an existing project")
    prompts_path = _prompts_path(prompts=prompts, task_set=task_set, prompts_project=prompts_project)
    max_new_tokens = whole_number("max_new_tokens", max_new_tokens, low=1, high=4096)
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    if not 0 <= float(temperature) <= 5:
        raise UserMistake("temperature must be 0-5")
    engine = generation_engine_checked(engine)
    return queue_checkpoints_run(kind=Run.Kind.SAMPLE, checkpoints=chosen, launched_by=launched_by, enqueue=enqueue,
                                 options={"prompts": str(prompts_path), "project": target.slug,
                                          "temperature": float(temperature), "max_new_tokens": int(max_new_tokens),
                                          "seed": int(seed), "engine": engine})


def sample_command_args(run: Run) -> list[str]:
    config = run.config
    args = ["sample", "--prompts", config["prompts"], "--out", str(Path(run.folder) / ITEMS_FILE),
            "--temperature", str(config["temperature"]), "--max-new-tokens", str(config["max_new_tokens"]),
            "--seed", str(config["seed"]), "--engine", config.get("engine", "transformers")]
    for checkpoint in config["checkpoints"]:
        args += ["--checkpoint", f"{checkpoint['name']}={checkpoint['path']}"]
    return args


def sample_import(run: Run) -> dict:
    """Store the sampled answers in the run's project through the review app's import; returns the counts.
    Raises UserMistake with the import's first error if the file is refused (nothing is stored then)."""
    project = Project.objects.get(slug=run.config["project"])
    try:
        with open(Path(run.folder) / ITEMS_FILE, encoding="utf-8") as lines:
            summary = items_import_file(project=project, lines=lines)
    except (OSError, ImportRejected) as error:
        raise UserMistake(f"the sampled answers could not be imported into {project.slug}: {error}") from None
    return {"project": project.slug, "prompts_created": summary.prompts_created,
            "prompts_existing": summary.prompts_existing, "responses_created": summary.responses_created,
            "pairs_created": summary.pairs_created}
