"""Task sets: the task files GRPO runs, evaluations and comparisons read, kept by the app (docs/runs.md).

A task set is made from the task families (`python -m training tasks make`'s families, variant, count and seed),
made from a project's prompts as open tasks (no verifier: a GRPO run's reward model scores them), or uploaded as
JSONL. Either way the file is checked by the training command's own loader in a subprocess
(`python -m training tasks describe`: every row, reference solutions run, errors as `line N: reason`), so the
web process never imports the verifiers and a set the app lists is one a run can load. An upload's reference
solutions are the uploader's code and may take as long as their limits allow, and a made set of thousands runs as
many reference solutions, so both are checked off the request (seed_demo's sets and tests' fixtures use the
checking-in-place task_sets_make): each is recorded as `checking` and a Celery task (sent once the row is committed, run in-process in the
embedded default, as exports are) makes it `ready` or `refused` with its one line. Every check is bounded in total
by PAIRWISE_TASK_SET_CHECK_S. The file is stored once
under PAIRWISE_INPUTS_ROOT/task-sets (a run input folder), named by its content hash, and never changed: the
hash is what run.json records, so a run's lineage names the set it read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import tempfile
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, models, transaction

from annotate.errors import UserMistake
from annotate.exports.filters import ExportFilters
from annotate.exports.pipeline import prompt_split
from annotate.jobs import enqueue
from annotate.limits import MAX_INT32, share_number, text_within, whole_number
from annotate.review.models import Project
from annotate.runs.input_paths import input_path
from annotate.runs.models import TaskSet
from annotate.runs.training_process import training_command, training_env
from training.atomic_write import move_into_place
from training.errors import PairwiseInputError
from training.task_families import FAMILIES, VARIANTS, make_tasks
from training.tasks import write_jsonl_atomically

logger = logging.getLogger(__name__)

# The task that checks an uploaded set (annotate/runs/tasks.py), found by its name in Celery's registry.
CHECK_TASK_SET = "annotate.runs.tasks.check_task_set"
MAX_MADE_TASKS = 5000
NAME_CHARS = 200


def task_set_folder() -> Path:
    return Path(settings.INPUTS_ROOT) / "task-sets"


def describe_task_files(paths: list[Path], *, shown_as: list[str]) -> list[dict]:
    """The training command's check and summary of task files (one subprocess for them all), or UserMistake with
    its one line, each file named as the user knows it."""
    args = [arg for path in paths for arg in ("--tasks", str(path))]
    limit = settings.PAIRWISE_TASK_SET_CHECK_S
    try:
        done = subprocess.run(training_command("tasks", "describe", *args), capture_output=True, text=True,
                              cwd=settings.BASE_DIR, env=training_env(), timeout=limit)
    except subprocess.TimeoutExpired:
        raise UserMistake(f"checking {', '.join(shown_as)} took over {limit} s (PAIRWISE_TASK_SET_CHECK_S), its "
                          "reference solutions running in the sandbox; split it into smaller files or make them "
                          "faster", status=503) from None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode == 2 and lines:
        message = lines[-1].removeprefix("error: ")
        for path, name in zip(paths, shown_as, strict=True):
            message = message.replace(f"tasks file {path}", name).replace(str(path), name)
        raise UserMistake(message)
    if done.returncode != 0:
        raise UserMistake(f"the training command could not check {', '.join(shown_as)} (exit code "
                          f"{done.returncode}): {lines[-1] if lines else 'no output'}", status=500)
    return [json.loads(line) for line in done.stdout.strip().splitlines()]


def _checked_name(name: str | None, default: str) -> str:
    name = " ".join(str(name or "").split()) or default
    text_within("task set name", name, NAME_CHARS)
    if TaskSet.records.filter(name=name).exclude(status=TaskSet.Status.REFUSED).exists():
        raise UserMistake(f"a task set named {name!r} exists already; choose another name")
    return name


def _store(*, scratch: Path, name: str, shown_as: str, source: str, recipe: dict | None,
           created_by: AbstractBaseUser | None) -> TaskSet:
    """Check the scratch file, then keep it under its hash and record the set; the same tasks twice are refused."""
    [summary] = describe_task_files([scratch], shown_as=[shown_as])
    return _keep(scratch=scratch, summary=summary, name=name, shown_as=shown_as, source=source, recipe=recipe,
                 created_by=created_by)


def _same_tasks(sha256: str, shown_as: str, *, other_than: int | None = None) -> None:
    """UserMistake naming the set (ready or being checked) that holds these bytes already."""
    same = TaskSet.records.filter(sha256=sha256).exclude(status=TaskSet.Status.REFUSED).exclude(pk=other_than).first()
    if same is not None:
        raise UserMistake(f"{shown_as} holds the same tasks as task set {same.name!r} (sha256 {sha256[:12]}…); use "
                          "that one")


def _forget_refused(*, name: str, sha256: str) -> None:
    """A refused set keeps its name and tasks' hash (both unique) only until a new set takes them."""
    TaskSet.records.filter(status=TaskSet.Status.REFUSED).filter(models.Q(name=name) | models.Q(sha256=sha256)).delete()


def _keep(*, scratch: Path, summary: dict, name: str, shown_as: str, source: str, recipe: dict | None,
          created_by: AbstractBaseUser | None) -> TaskSet:
    _same_tasks(summary["sha256"], shown_as)
    target = task_set_folder() / f"{summary['sha256']}.jsonl"
    input_path("task set folder", target)  # PAIRWISE_INPUTS_ROOT must be one the runs may read
    target.parent.mkdir(parents=True, exist_ok=True)
    move_into_place(scratch, target)
    try:
        with transaction.atomic():
            _forget_refused(name=name, sha256=summary["sha256"])
            return TaskSet.objects.create(
                name=name, path=str(target), sha256=summary["sha256"], count=summary["count"],
                variant=summary.get("variant") or "", families=summary["families"], scorers=summary["scorers"],
                source=source, recipe=recipe, created_by=created_by)
    except IntegrityError:  # the same name or tasks stored by someone else meanwhile; the file is theirs too
        raise UserMistake(f"task set {name!r} or the same tasks were stored just now by someone else; reload the "
                          "list") from None


def _scratch_file() -> Path:
    folder = task_set_folder()
    folder.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=folder, prefix=".incoming-", suffix=".jsonl")
    os.close(handle)
    return Path(name)


def _recipe(*, families: list[str], variant: str, n, seed) -> dict:
    chosen = [family.strip() for family in families if family and family.strip()]
    unknown = [family for family in chosen if family not in FAMILIES]
    if not chosen or unknown:
        what = f"unknown family {', '.join(map(repr, unknown))}" if unknown else "no family chosen"
        raise UserMistake(f"{what}; choose from {', '.join(sorted(FAMILIES))}")
    if variant not in VARIANTS:
        raise UserMistake(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return {"families": chosen, "variant": variant, "n": whole_number("count", n, low=1, high=MAX_MADE_TASKS),
            "seed": whole_number("seed", seed, low=0, high=MAX_INT32)}


def _recipe_name(recipe: dict) -> str:
    return f"{'+'.join(recipe['families'])} · {recipe['variant']} · {recipe['n']} · seed {recipe['seed']}"


def task_sets_make(recipes: list[dict], *, created_by: AbstractBaseUser | None = None) -> list[TaskSet]:
    """Draw each recipe's tasks (families in turn, variant, n, seed, optional name) and keep each as a task set;
    the same recipe gives the same file. All are checked by one run of the training command, and any mistake
    refuses them all before one is kept."""
    checked = [_recipe(families=r["families"], variant=r.get("variant", "train"), n=r["n"], seed=r["seed"])
               for r in recipes]
    names = [_checked_name(recipe.get("name"), _recipe_name(made)) for recipe, made in zip(recipes, checked,
                                                                                          strict=True)]
    scratches = []
    try:
        for made in checked:
            try:
                rows = make_tasks(",".join(made["families"]), n=made["n"], seed=made["seed"], variant=made["variant"])
            except PairwiseInputError as error:
                raise UserMistake(str(error)) from None
            scratches.append(_scratch_file())
            write_jsonl_atomically(scratches[-1], rows)
        shown = [f"the {','.join(made['families'])} tasks" for made in checked]
        summaries = describe_task_files(scratches, shown_as=shown)
        return [_keep(scratch=scratch, summary=summary, name=name, shown_as=what, source=TaskSet.Source.MADE,
                      recipe=made, created_by=created_by)
                for scratch, summary, name, what, made in zip(scratches, summaries, names, shown, checked, strict=True)]
    finally:
        for scratch in scratches:
            scratch.unlink(missing_ok=True)


def task_set_make(*, families: list[str], variant: str = "train", n, seed, name: str | None = None,
                  created_by: AbstractBaseUser | None = None) -> TaskSet:
    """Draw `n` tasks of the families (in turn) and keep them as a task set."""
    [task_set] = task_sets_make([{"families": families, "variant": variant, "n": n, "seed": seed, "name": name}],
                                created_by=created_by)
    return task_set


def task_set_upload(*, upload, name: str | None = None, created_by: AbstractBaseUser | None = None) -> TaskSet:
    """Record an uploaded JSONL task file (a Django UploadedFile) as `checking` and send its check, which runs once
    the row is committed (`task_set_check`): any bad line refuses it all. A name in use, or the same bytes as a set
    the app keeps or is checking, is refused here; a refused set's name and bytes may be uploaded again."""
    if upload is None:
        raise UserMistake("choose a task file (JSONL, one task a line) to upload")
    shown_as = Path(str(upload.name or "the uploaded file")).name
    default = re.sub(r"\.jsonl?$", "", shown_as) or "uploaded tasks"
    name = _checked_name(name, default)
    scratch = _scratch_file()
    try:
        digest = hashlib.sha256()
        with open(scratch, "wb") as out:
            for chunk in upload.chunks():
                digest.update(chunk)
                out.write(chunk)
        return _record_for_check(scratch=scratch, sha256=digest.hexdigest(), name=name, shown_as=shown_as,
                                 source=TaskSet.Source.UPLOADED, recipe={"file": shown_as}, created_by=created_by)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


def task_set_make_checked_later(*, families: list[str], variant: str = "train", n, seed, name: str | None = None,
                                created_by: AbstractBaseUser | None = None) -> TaskSet:
    """What the runs page and the API make: the recipe and the name are checked and the tasks drawn here (a mistake
    is refused at once, in one line), and the set is recorded as `checking` while the training command's loader
    checks it off the request, as an upload is (`task_set_check`), since the check runs every reference solution."""
    made = _recipe(families=families, variant=variant, n=n, seed=seed)
    name = _checked_name(name, _recipe_name(made))
    try:
        rows = make_tasks(",".join(made["families"]), n=made["n"], seed=made["seed"], variant=made["variant"])
    except PairwiseInputError as error:
        raise UserMistake(str(error)) from None
    scratch = _scratch_file()
    try:
        write_jsonl_atomically(scratch, rows)
        return _record_for_check(scratch=scratch, sha256=hashlib.sha256(scratch.read_bytes()).hexdigest(), name=name,
                                 shown_as=_made_shown_as(made), source=TaskSet.Source.MADE, recipe=made,
                                 created_by=created_by)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


def _made_shown_as(recipe: dict) -> str:
    return f"the {','.join(recipe['families'])} tasks"


def _record_for_check(*, scratch: Path, sha256: str, name: str, shown_as: str, source: str, recipe: dict,
                      created_by: AbstractBaseUser | None) -> TaskSet:
    """Record the scratch file's set as `checking` and send its check once the row is committed; the same tasks as
    a set kept or being checked are refused here."""
    _same_tasks(sha256, shown_as)
    try:
        with transaction.atomic():
            _forget_refused(name=name, sha256=sha256)
            task_set = TaskSet.records.create(name=name, path=str(scratch), sha256=sha256, count=0, source=source,
                                              recipe=recipe, created_by=created_by, status=TaskSet.Status.CHECKING)
            transaction.on_commit(partial(_send_check, task_set.pk))
    except IntegrityError:  # the same name or bytes recorded by someone else meanwhile
        raise UserMistake(f"task set {name!r} or the same tasks were recorded just now by someone else; reload the "
                          "list") from None
    return task_set


def _send_check(task_set_id: int) -> None:
    """Hand the check off the request (after commit; annotate/jobs.py enqueue: a thread of this process with no
    broker); a broker that cannot be reached refuses the set, saying so."""
    enqueue(CHECK_TASK_SET, task_set_id, thread_name=f"task-set-check-{task_set_id}",
            could_not_queue=lambda error: _refuse(task_set_id, f"the check could not be queued "
                                                  f"({type(error).__name__}: {error}); check CELERY_BROKER_URL, then "
                                                  "upload or make the set again"))


def _refuse(task_set_id: int, reason: str) -> None:
    checking = TaskSet.records.filter(pk=task_set_id, status=TaskSet.Status.CHECKING)
    for path in checking.values_list("path", flat=True):
        Path(path).unlink(missing_ok=True)
    checking.update(status=TaskSet.Status.REFUSED, error=" ".join(reason.split()))


def task_set_check(task_set_id: int) -> TaskSet | None:
    """Check a set being checked (uploaded, or made off the request) with the training command's loader, then keep its file under its hash
    (`ready`) or refuse it with its one line (`refused`); None when the set is gone or no longer being checked (it
    was forgotten, or this is a repeated delivery)."""
    task_set = TaskSet.records.filter(pk=task_set_id, status=TaskSet.Status.CHECKING).first()
    if task_set is None:
        return None
    recipe = task_set.recipe or {}
    scratch = Path(task_set.path)
    shown_as = _made_shown_as(recipe) if task_set.source == TaskSet.Source.MADE else recipe.get("file") or task_set.name
    try:
        [summary] = describe_task_files([scratch], shown_as=[shown_as])
        _same_tasks(summary["sha256"], shown_as, other_than=task_set.pk)
        target = task_set_folder() / f"{summary['sha256']}.jsonl"
        input_path("task set folder", target)
        move_into_place(scratch, target)
    except UserMistake as mistake:
        _refuse(task_set.pk, str(mistake))
    except Exception as error:
        logger.exception("task set %s: the check failed", task_set.pk)
        again = "make it again" if task_set.source == TaskSet.Source.MADE else "upload the file again"
        _refuse(task_set.pk, f"the check failed ({type(error).__name__}: {error}); {again}")
    else:
        TaskSet.records.filter(pk=task_set.pk, status=TaskSet.Status.CHECKING).update(
            status=TaskSet.Status.READY, path=str(target), sha256=summary["sha256"], count=summary["count"],
            variant=summary.get("variant") or "", families=summary["families"], scorers=summary["scorers"])
    return TaskSet.records.filter(pk=task_set.pk).first()


def task_set_forget(task_set: TaskSet) -> None:
    """The way out of a set being checked or refused: forget it (its check, if still to run, then does nothing)."""
    if task_set.status == TaskSet.Status.READY:
        raise UserMistake(f"task set {task_set.name!r} is kept; only a set being checked or refused can be forgotten")
    if task_set.status == TaskSet.Status.CHECKING:
        Path(task_set.path).unlink(missing_ok=True)
    task_set.delete()


OPEN_VARIANTS = ("all", "train", "heldout")
# The export's own default test share: with the same seed, the held-out open tasks are the prompts of a snapshot's
# test split, which a reward model trained on its train split never saw.
OPEN_HELDOUT_SHARE = ExportFilters.test_ratio


def open_task_rows(project: Project, *, variant: str, seed: int, test_ratio: float) -> list[dict]:
    """Each distinct prompt of the project once (the first imported of those with one text, as the export counts
    "the same prompt"), as an open task: task_id from the prompt's import id, so the same prompt keeps its id in
    every set. Its side (train or heldout) is the export's split of that prompt under `seed` and `test_ratio`."""
    rows, seen = [], set()
    prompts = project.prompts.order_by("id").values_list("external_id", "messages", "content_key", "tags")
    for external_id, messages, key, tags in prompts.iterator():
        if key in seen:
            continue
        seen.add(key)
        side = "heldout" if prompt_split(prompt_key=key, seed=seed, test_ratio=test_ratio) == "test" else "train"
        if variant not in ("all", side):
            continue
        row = {"task_id": f"{project.slug}/{external_id}", "kind": "open", "prompt": messages,
               "meta": {"project": project.slug, "prompt_id": external_id, "variant": side}}
        if isinstance(tags, list) and tags and all(isinstance(tag, str) for tag in tags):
            row["tags"] = tags
        rows.append(row)
    return rows


def task_set_from_prompts(*, project, variant: str = "all", seed=0, test_ratio=None, name: str | None = None,
                          created_by: AbstractBaseUser | None = None) -> TaskSet:
    """An open task set from a project's prompts (all of them, or the train or held-out side of the export's split),
    checked by `python -m training tasks describe` and kept like any other set."""
    slug = str(project if not isinstance(project, Project) else project.slug).strip()
    source = Project.objects.filter(slug=slug).first() if slug else None
    if source is None:
        raise UserMistake(f"no project {slug[:80] or '(empty)'!r} to take prompts from; give a project's slug")
    if variant not in OPEN_VARIANTS:
        raise UserMistake(f"variant must be one of {', '.join(OPEN_VARIANTS)}, got {str(variant)[:40]!r}")
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    ratio = OPEN_HELDOUT_SHARE if test_ratio in (None, "") else share_number("test_ratio", test_ratio, high=0.9)
    rows = open_task_rows(source, variant=variant, seed=seed, test_ratio=ratio)
    if not rows:
        if not source.prompts.exists():
            raise UserMistake(f"project {source.slug} has no prompts to make open tasks from; import some first")
        raise UserMistake(f"none of project {source.slug}'s prompts falls on the {variant} side at test_ratio {ratio:g} "
                          f"and seed {seed}; choose variant all, or another test_ratio or seed")
    recipe = {"project": source.slug, "variant": variant, "seed": seed, "test_ratio": ratio, "n": len(rows)}
    shown = f"{source.slug} prompts · open · {variant}" + ("" if variant == "all" else f" · seed {seed}")
    name = _checked_name(name, shown)
    scratch = _scratch_file()
    try:
        write_jsonl_atomically(scratch, rows)
        return _store(scratch=scratch, name=name, shown_as=f"the open tasks of project {source.slug}",
                      source=TaskSet.Source.PROMPTS, recipe=recipe, created_by=created_by)
    finally:
        scratch.unlink(missing_ok=True)


def task_set_resolve(reference, *, key: str = "task_set") -> TaskSet:
    """A task set by id or name, or one line naming those that exist."""
    text = str(reference).strip() if reference is not None else ""
    found = TaskSet.objects.filter(pk=int(text)).first() if text.isdigit() and len(text) < 19 else None
    if found is None and text:
        found = TaskSet.objects.filter(name=text).first()
    if found is None and text:
        unready = TaskSet.records.filter(name=text).first()
        if unready is not None:
            state = ("is still being checked: wait for it (the Training runs page shows it)"
                     if unready.status == TaskSet.Status.CHECKING else f"was refused: {unready.error}")
            raise UserMistake(f"{key} {text!r} {state}")
    if found is None:
        names = list(TaskSet.objects.order_by("name").values_list("name", flat=True)[:10])
        known = f"known: {', '.join(names)}" if names else "none exists yet: make one on the Training runs page"
        raise UserMistake(f"{key} {text or '(empty)'!r} is not a task set ({known})")
    if not Path(found.path).is_file():
        raise UserMistake(f"task set {found.name!r}: its file {found.path} is gone; make or upload it again")
    return found


def task_set_for_path(path: str) -> TaskSet | None:
    """The task set stored at this path, when a launch names its file rather than the set."""
    return TaskSet.objects.filter(path=str(path)).first()
