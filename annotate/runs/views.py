"""Pages of training runs (engineers and admins): the runs list with the launch form, a run, a checkpoint."""

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotate.errors import UserMistake
from annotate.review.models import Project
from annotate.review.rendering import markdown_to_safe_html
from annotate.roles import ADMIN_ROLES, REVIEWER_ROLES, STAFF_ROLES, has_role, require_role
from annotate.runs.api import run_or_404
from annotate.runs.audit import (
    audit_create,
    audit_judge,
    audit_next,
    audit_results,
    open_items_count,
    served_token,
)
from annotate.runs.checkpoints import checkpoint_rename, checkpoints_by_role, is_reward_model
from annotate.runs.compare import compare_launch
from annotate.runs.curves import runs_curves_compare
from annotate.runs.demo_checkpoint import (
    DEMO_CHECKPOINT,
    DEMO_STEPS,
    demo_checkpoint_queue,
    sft_build_estimate,
    sft_build_under_way,
    sft_progress,
)
from annotate.runs.evaluation import eval_launch, eval_side_by_side, evals_of
from annotate.runs.filters import launch_values_from_run, runs_filtered
from annotate.runs.launch import LAUNCH_KINDS, config_refusal, run_cancel, run_launch
from annotate.runs.launch_form import (
    FAMILY_CHOICES,
    FORM_FIELDS,
    LINK_KINDS,
    VARIANT_CHOICES,
    compare_prompts_source,
    default_snapshot,
    heldout_asked_for,
    launch_inputs,
    launch_values,
    snapshot_choices,
    snapshot_note,
    task_set_choices,
)
from annotate.runs.models import AuditJudgment, Checkpoint, Run, TaskSet
from annotate.runs.present import (
    ancestry,
    children_by_kind,
    config_without_secrets,
    cycle_ledger,
    ledger_rows,
    run_payload,
)
from annotate.runs.queue import vllm_ready
from annotate.runs.task_sets import (
    OPEN_VARIANTS,
    task_set_forget,
    task_set_from_prompts,
    task_set_make_checked_later,
    task_set_upload,
)


def _staff_only(request, to: str) -> None:
    require_role(request, STAFF_ROLES, f"only admins and engineers can {to}")


def _admins_only(request, to: str) -> None:
    require_role(request, ADMIN_ROLES, f"only admins can {to}")


def runs_page(request):
    _staff_only(request, "launch and follow training runs")
    values = launch_values(request.GET)
    error = None
    if request.method == "GET" and request.GET.get("again"):
        try:
            values.update(launch_values_from_run(run_id=request.GET["again"]))
            values["train_on_heldout"] = heldout_asked_for(request.GET["again"])
            error = config_refusal(request.GET["again"])  # launched again to fix what the check refused
        except UserMistake as mistake:
            error = str(mistake)
    if request.method == "POST":
        values.update({name: request.POST.get(name, "").strip() for name in FORM_FIELDS})
        values["train_on_heldout"] = request.POST.get("train_on_heldout") == "on"
        try:
            run = run_launch(kind=values["kind"], base_checkpoint=values["base_checkpoint"], config=values["config"],
                             **launch_inputs(values), backend=values["backend"], launched_by=request.user,
                             check_now=False, train_on_heldout=values["train_on_heldout"])
            messages.success(request, f"Run {run.pk} recorded; the training command is checking its config.")
            return redirect("run-page", run_id=run.pk)
        except UserMistake as mistake:
            error = str(mistake)
    runs_query, run_filters = runs_filtered(params=request.GET)
    runs = runs_query.select_related("base_checkpoint", "launched_by", "output_checkpoint", "export", "task_set")[:100]
    building = sft_build_under_way()
    # No reward model is offered as a base or to evaluate and compare: it scores answers but writes none.
    text_models, reward_models = checkpoints_by_role()
    snapshots = snapshot_choices()
    values["export"] = values["export"] or default_snapshot(snapshots)
    unlisted = snapshot_note(values["export"], snapshots) if values["kind"] in ("dpo", "reward") else None
    return render(request, "runs/list.html", {
        "runs": runs, "run_filters": run_filters, "checkpoints": text_models, "values": values, "error": error,
        "projects": Project.objects.order_by("slug"), "can_compare": has_role(request.user, ADMIN_ROLES),
        "kinds": LAUNCH_KINDS, "backends": Run.Backend.values, "reward_models": reward_models,
        "open_variants": OPEN_VARIANTS, "vllm_ready": vllm_ready(),
        "snapshots": snapshots, "snapshot_note": unlisted if unlisted != error else None, "task_sets": TaskSet.records.order_by("name"),
        "training_task_sets": task_set_choices(for_training=True),
        "evaluation_task_sets": task_set_choices(for_training=False), "families": FAMILY_CHOICES, "variants": VARIANT_CHOICES,
        "sft_build": sft_progress(building) if building else None, "demo_checkpoint": DEMO_CHECKPOINT,
        "demo_steps": DEMO_STEPS, "build_estimate": None if text_models or building else sft_build_estimate(),
        "busy": building is not None or any(not run.finished for run in runs)
        or TaskSet.records.filter(status=TaskSet.Status.CHECKING).exists(),
        "checkpoint_rows": Checkpoint.objects.select_related("parent", "run").order_by("-id")[:50],
        # The form is open when asked for (a link that picks an input, Launch again, the Launch button), after a
        # refused launch, and while there is no run at all to come back for.
        "launch_open": bool(error) or request.method == "POST" or any(
            key in request.GET for key in (*LINK_KINDS, "launch", "again")) or not Run.objects.exists(),
    })


@require_POST
def task_set_make_page(request):
    _staff_only(request, "make task sets")
    form = request.POST
    try:
        if form.get("source") == "prompts":
            task_set = task_set_from_prompts(project=form.get("project", ""), variant=form.get("variant", "all"),
                                             seed=form.get("seed") or 0, test_ratio=form.get("test_ratio") or None,
                                             name=form.get("name"), created_by=request.user)
        elif form.get("source") == "upload":
            task_set = task_set_upload(upload=request.FILES.get("file"), name=form.get("name"),
                                       created_by=request.user)
        else:
            task_set = task_set_make_checked_later(families=form.getlist("families"),
                                                   variant=form.get("variant", "train"), n=form.get("n") or 0,
                                                   seed=form.get("seed") or 0, name=form.get("name"),
                                                   created_by=request.user)
    except UserMistake as mistake:
        messages.error(request, f"Task set: {mistake}")
        return redirect(reverse("runs-page") + "#task-sets")
    task_set.refresh_from_db()  # an upload or a made set is checked already where its check runs in-process
    if task_set.status == TaskSet.Status.CHECKING:
        messages.success(request, f"Task set {task_set.name!r} is being checked; the list below shows its result.")
    elif task_set.status == TaskSet.Status.REFUSED:
        messages.error(request, f"Task set: {task_set.error}")
    else:
        messages.success(request, f"Task set {task_set.name!r}: {task_set.count} tasks kept.")
    return redirect(reverse("runs-page") + "#task-sets")


@require_POST
def task_set_forget_page(request, pk: int):
    _staff_only(request, "forget task sets")
    task_set = TaskSet.records.filter(pk=pk).first()
    if task_set is None:
        raise Http404(f"no task set {pk}")
    try:
        task_set_forget(task_set)
    except UserMistake as mistake:
        messages.error(request, f"Task set: {mistake}")
    else:
        messages.success(request, f"Task set {task_set.name!r} forgotten.")
    return redirect(reverse("runs-page") + "#task-sets")


@require_POST
def demo_checkpoint_build_page(request):
    _staff_only(request, "build the demo checkpoint")
    try:
        run = demo_checkpoint_queue(steps=request.POST.get("steps", ""), launched_by=request.user)
    except UserMistake as mistake:
        messages.error(request, f"Demo checkpoint: {mistake}")
        return redirect("runs-page")
    if run is None:
        messages.success(request, f"The checkpoint {DEMO_CHECKPOINT} is registered already.")
        return redirect("runs-page")
    return redirect("run-page", run_id=run.pk)


def _launch_from_form(request, what: str, launch, done: str):
    """A form on the runs page that queues a run: to its page, or back with the one-line mistake."""
    _staff_only(request, what.lower())
    try:
        run = launch()
    except (UserMistake, ValueError) as mistake:
        messages.error(request, f"{what}: {mistake}")
        return redirect("runs-page")
    messages.success(request, f"Run {run.pk} {done}.")
    return redirect("run-page", run_id=run.pk)


@require_POST
def compare_page(request):
    _admins_only(request, "compare checkpoints: the answers are imported into a project")
    form = request.POST
    return _launch_from_form(request, "Compare checkpoints", lambda: compare_launch(
        checkpoints=form.getlist("checkpoints"), project=form.get("project", ""),
        **compare_prompts_source(form.get("prompts_from", "")),
        temperature=float(form.get("temperature") or 0.7), max_new_tokens=form.get("max_new_tokens") or 256,
        engine=form.get("engine") or "transformers", launched_by=request.user), "samples the answers")


@require_POST
def evaluate_page(request):
    form = request.POST
    return _launch_from_form(request, "Evaluate checkpoints", lambda: eval_launch(
        checkpoints=form.getlist("checkpoints"), task_set=form.get("task_set") or None, samples=form.get("samples") or 1,
        temperature=float(form.get("temperature") or 0), max_new_tokens=form.get("max_new_tokens") or 128,
        engine=form.get("engine") or "transformers", launched_by=request.user), "evaluates the checkpoints")


def run_page(request, run_id: int):
    _staff_only(request, "follow training runs")
    run = run_or_404(run_id)
    payload = run_payload(run, detail=True)
    return render(request, "runs/run.html", {
        "run": run, "payload": payload, "charts": payload["charts"],
        "config_text": json.dumps(config_without_secrets(run.config), indent=2, sort_keys=True, ensure_ascii=False),
        "resolved_text": (json.dumps(config_without_secrets(run.resolved_config), indent=2, sort_keys=True,
                                     ensure_ascii=False)
                          if run.resolved_config else ""),
        "ledger_text": json.dumps(run.ledger, indent=2, sort_keys=True) if run.ledger else "",
        "ledger_rows": ledger_rows(run.ledger),
        "cycle_ledger": cycle_ledger(run.ledger),
        "base_parents": ancestry(run.base_checkpoint) if run.base_checkpoint else [],
    })


@require_POST
def run_cancel_page(request, run_id: int):
    _staff_only(request, "cancel training runs")
    try:
        run_cancel(run_or_404(run_id))
        messages.success(request, f"Run {run_id}: cancel sent.")
    except UserMistake as mistake:
        messages.error(request, str(mistake))
    return redirect("run-page", run_id=run_id)


@require_POST
def run_resume_page(request, run_id: int):
    """The run page's Resume: what `manage.py resume_slurm_run` does; a run that cannot go on gets its page back with
    the reason (409)."""
    from annotate.runs.slurm import slurm_resume

    _staff_only(request, "resume training runs")
    try:
        run = slurm_resume(run_or_404(run_id))
    except UserMistake as mistake:
        messages.error(request, str(mistake))
        refused = run_page(request, run_id)
        refused.status_code = mistake.status
        return refused
    if run.status != Run.Status.RUNNING:  # sbatch refused the new chain: the run failed again, saying why
        messages.error(request, f"Run {run_id}: {run.error}")
    else:
        messages.success(request, f"Run {run_id}: resumed, following Slurm job {run.slurm_job_id}.")
    return redirect("run-page", run_id=run_id)


def checkpoint_page(request, checkpoint_id: int, *, rename_error: str = "", rename_value: str | None = None,
                    status: int = 200):
    _staff_only(request, "see checkpoints")
    checkpoint = (Checkpoint.objects.select_related("parent", "run__reward_model__run").filter(pk=checkpoint_id)
                  .first())
    if checkpoint is None:
        raise Http404(f"no checkpoint {checkpoint_id}")
    made_by = checkpoint.run
    return render(request, "runs/checkpoint.html", {
        "checkpoint": checkpoint, "parents": ancestry(checkpoint), "made_by": made_by,
        "made_by_payload": run_payload(made_by, detail=True) if made_by else None,
        "columns": children_by_kind(checkpoint), "is_reward_model": is_reward_model(checkpoint),
        "scored_runs": checkpoint.runs_scored.select_related("output_checkpoint", "task_set").order_by("id"),
        "audit": audit_results(checkpoint=checkpoint),
        "evaluations": [(run, eval_side_by_side(run)) for run in evals_of(checkpoint)[:5]],
        "rename_error": rename_error, "rename_value": checkpoint.name if rename_value is None else rename_value,
    }, status=status)


@require_POST
def checkpoint_rename_page(request, checkpoint_id: int):
    """The checkpoint page's rename form: back to the page under the new name, or the page again with the one-line
    refusal (400) and what was typed."""
    _staff_only(request, "rename checkpoints")
    checkpoint = Checkpoint.objects.filter(pk=checkpoint_id).first()
    if checkpoint is None:
        raise Http404(f"no checkpoint {checkpoint_id}")
    wanted, old = request.POST.get("name", ""), checkpoint.name
    try:
        checkpoint_rename(checkpoint=checkpoint, name=wanted, by=request.user)
    except UserMistake as mistake:
        return checkpoint_page(request, checkpoint_id, rename_error=str(mistake), rename_value=wanted,
                               status=mistake.status)
    if checkpoint.name != old:
        messages.success(request, f"Checkpoint {old!r} is now called {checkpoint.name!r}.")
    return redirect("checkpoint-page", checkpoint_id=checkpoint.pk)


@require_POST
def run_audit_create_page(request, run_id: int):
    _staff_only(request, "start answer audits")
    try:
        batch = audit_create(run=run_or_404(run_id), size=request.POST.get("size") or 0,
                             overlap=request.POST.get("overlap") or 3,
                             spread_over_steps=request.POST.get("spread_over_steps") == "on", created_by=request.user)
        messages.success(request, f"Audit batch {batch.pk}: {batch.items.count()} rewarded answers for reviewers.")
    except (UserMistake, ValueError) as mistake:
        messages.error(request, f"Answer audit: {mistake}")
    return redirect("run-page", run_id=run_id)


def audit_page(request):
    """One rewarded answer at a time, alone, for a reviewer to say whether its reasoning holds."""
    require_role(request, REVIEWER_ROLES, "only reviewers can audit answers")
    error, status, values = None, 200, {"verdict": "", "rationale": ""}
    if request.method == "POST":
        values = {"verdict": request.POST.get("verdict", ""), "rationale": request.POST.get("rationale", "")}
        try:
            audit_judge(item_id=request.POST.get("item", ""), reviewer=request.user,
                        token=request.POST.get("token", ""), **values)
            messages.success(request, "Verdict saved.")
            return redirect("audit-page")
        except UserMistake as mistake:
            error, status = str(mistake), mistake.status
    item = audit_next(reviewer=request.user)
    return render(request, "runs/audit.html", {
        "item": item, "answer_html": markdown_to_safe_html(item.answer) if item else "", "error": error,
        "token": served_token(item, request.user) if item else "",
        "values": values, "left": open_items_count(request.user), "verdicts": AuditJudgment.Verdict.choices,
    }, status=status)


def runs_curves_page(request):
    """Two or more runs' curves on shared charts; a wrong choice of runs is one line on the page (400)."""
    _staff_only(request, "compare training runs")
    try:
        compared = runs_curves_compare(run_ids=request.GET.getlist("run"))
    except UserMistake as mistake:
        return render(request, "runs/curves.html", {"error": str(mistake)}, status=mistake.status)
    return render(request, "runs/curves.html", compared)
