"""Training runs over the API (engineers and admins): launch, list, follow, cancel; checkpoints."""

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.errors import UserMistake
from annotate.permissions import CanReview, IsAdmin, IsAdminOrEngineer
from annotate.review.rendering import markdown_to_safe_html
from annotate.runs.audit import audit_create, audit_judge, audit_next, served_token
from annotate.runs.checkpoints import checkpoint_rename
from annotate.runs.compare import compare_launch
from annotate.runs.evaluation import eval_launch
from annotate.runs.launch import run_cancel, run_launch
from annotate.runs.models import Checkpoint, Run
from annotate.runs.present import checkpoint_payload, checkpoint_summary, run_payload
from annotate.runs.slurm import slurm_refresh

LAUNCH_FIELDS = {"kind", "base_checkpoint", "config", "snapshot", "tasks", "export", "task_set", "reward_model",
                 "train_on_heldout",
                 "backend"}


class RunLaunchSerializer(serializers.Serializer):
    """The request body, for the schema; run_launch checks it (and the training CLI checks the config)."""

    kind = serializers.ChoiceField(["dpo", "grpo", "reward"])
    base_checkpoint = serializers.CharField(help_text="a registered checkpoint's name or id (a causal LM, not a "
                                            "reward model)")
    export = serializers.IntegerField(required=False, help_text="a finished export's id: its snapshot (dpo, reward)")
    task_set = serializers.CharField(required=False, help_text="a task set's id or name (grpo)")
    reward_model = serializers.CharField(required=False, help_text="a registered reward model's name or id, to score "
                                         "a grpo run's answers beside the verifier (open tasks: alone)")
    snapshot = serializers.CharField(required=False, help_text="or a snapshot folder under the run input folders "
                                     "(dpo, reward)")
    tasks = serializers.CharField(required=False, help_text="or a task file under the run input folders (grpo)")
    config = serializers.JSONField(required=False, help_text="TRL config keys, as a mapping or YAML text")
    backend = serializers.ChoiceField(["local", "slurm"], required=False, default="local")
    train_on_heldout = serializers.BooleanField(required=False, default=False, help_text="train a grpo run on a "
                                                "held-out task set all the same (refused otherwise)")


def run_or_404(run_id: int) -> Run:
    run = (Run.objects.select_related("base_checkpoint", "launched_by", "reward_model__run")
           .filter(pk=run_id).first())
    if run is None:
        raise Http404(f"no run {run_id}")
    return slurm_refresh(run)


def launch_from(data, user) -> Run:
    if not isinstance(data, dict):
        raise UserMistake("send a JSON object: kind, base_checkpoint, export or task_set (or a snapshot or tasks path), "
                          "config, backend")
    unknown = sorted(set(data) - LAUNCH_FIELDS)
    if unknown:
        raise UserMistake(f"unknown field {unknown[0]!r}; a launch takes {', '.join(sorted(LAUNCH_FIELDS))} "
                          "(TRL keys go inside config)")
    if data.get("train_on_heldout") not in (None, True, False):
        raise UserMistake("train_on_heldout must be true or false")
    return run_launch(kind=data.get("kind", ""), base_checkpoint=data.get("base_checkpoint"),
                      config=data.get("config"), snapshot=data.get("snapshot") or None,
                      tasks=data.get("tasks") or None, export=data.get("export") or None,
                      task_set=data.get("task_set") or None, reward_model=data.get("reward_model") or None,
                      backend=data.get("backend") or "local", launched_by=user, check_now=False,
                      train_on_heldout=data.get("train_on_heldout") is True)


class RunsView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Launch a training run", request=RunLaunchSerializer,
                   responses={202: OpenApiResponse(description="the run, checking its config (then queued, or failed "
                                                                  "with \"config refused: <the line>\"); poll its url")})
    def post(self, request):
        run = launch_from(request.data, request.user)
        return Response(run_payload(run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(summary="Runs, newest first", responses={200: OpenApiResponse(description="a list of runs")})
    def get(self, request):
        runs = Run.objects.select_related("base_checkpoint", "launched_by", "export__project",
                                          "reward_model__run__export__project")[:200]
        return Response([run_payload(run) for run in runs])


class RunDetailView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="A run: status, metrics, curves, ledger, config, eval table, lineage",
                   responses={200: OpenApiResponse(description="the run")})
    def get(self, request, run_id: int):
        return Response(run_payload(run_or_404(run_id), detail=True))


class RunCancelView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Cancel a queued or running run", request=None,
                   responses={202: OpenApiResponse(description="the run; a running one stops within seconds")})
    def post(self, request, run_id: int):
        run = run_cancel(run_or_404(run_id))
        return Response(run_payload(Run.objects.get(pk=run.pk)), status=status.HTTP_202_ACCEPTED)


class CompareSerializer(serializers.Serializer):
    checkpoints = serializers.ListField(child=serializers.CharField(), help_text="two or more checkpoint names or ids")
    prompts_project = serializers.SlugField(required=False, help_text="sample answers to this project's prompts")
    task_set = serializers.CharField(required=False, help_text="or to the prompts of a task set (id or name)")
    prompts = serializers.CharField(required=False, help_text="or to a JSONL file of prompt_id and prompt lines")
    project = serializers.SlugField(help_text="the project the answers are imported into")
    temperature = serializers.FloatField(required=False, default=0.7)
    max_new_tokens = serializers.IntegerField(required=False, default=256)
    seed = serializers.IntegerField(required=False, default=0)
    engine = serializers.CharField(required=False, default="transformers", help_text="transformers, or vllm: vLLM's "
                                   "offline engine in the generation environment (scripts/install_vllm.sh)")


class CompareView(APIView):
    # A comparison imports prompts and answers into a project, which is an admin's to fill (as item import is).
    permission_classes = [IsAdmin]

    @extend_schema(summary="Sample answers from checkpoints and import them as a review batch",
                   request=CompareSerializer,
                   responses={202: OpenApiResponse(description="the sample run, queued; poll its url")})
    def post(self, request):
        body = CompareSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = compare_launch(**body.validated_data, launched_by=request.user)
        return Response(run_payload(run), status=status.HTTP_202_ACCEPTED)


class AuditCreateSerializer(serializers.Serializer):
    size = serializers.IntegerField(help_text="answers to sample (1-5000)")
    overlap = serializers.IntegerField(required=False, default=3, help_text="reviewers per answer (1-20)")
    seed = serializers.IntegerField(required=False, default=0)
    spread_over_steps = serializers.BooleanField(
        required=False, default=False, help_text="draw evenly from each step window's most rewarded answers, so the "
                                                 "audit by training step compares windows of equal size")


class RunAuditsView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Sample a GRPO run's fully rewarded answers for reviewers to audit",
                   request=AuditCreateSerializer, responses={201: OpenApiResponse(description="the batch")})
    def post(self, request, run_id: int):
        body = AuditCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)  # their ranges: audit_create, with annotate/limits.py's whole_number
        batch = audit_create(run=run_or_404(run_id), created_by=request.user, **body.validated_data)
        return Response({"id": batch.pk, "run": batch.run_id, "answers": batch.items.count(),
                         "overlap": batch.overlap, "spread_over_steps": batch.spread_over_steps},
                        status=status.HTTP_201_CREATED)


def audit_item_payload(item, reviewer) -> dict:
    """What a reviewer sees: the prompt and the answer, never the run, checkpoint, rollout or reward; and the
    token their verdict sends back (it was served to them)."""
    return {"id": item.pk, "prompt": item.prompt,
            "answer": {"text": item.answer, "html": markdown_to_safe_html(item.answer)},
            "token": served_token(item, reviewer)}


class AuditNextView(APIView):
    permission_classes = [CanReview]

    @extend_schema(summary="The next rewarded answer to audit; 204 when none is left",
                   responses={200: OpenApiResponse(description="id, prompt, answer"), 204: None})
    def get(self, request):
        item = audit_next(reviewer=request.user)
        if item is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(audit_item_payload(item, request.user))


class AuditJudgmentSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(["yes", "no", "unsure"], help_text="does the reasoning hold?")
    rationale = serializers.CharField(help_text="why it holds or where it breaks")
    token = serializers.CharField(help_text="the token that came with the answer (GET /api/v1/audits/next)")


class AuditJudgmentView(APIView):
    permission_classes = [CanReview]

    @extend_schema(summary="Judge whether a rewarded answer's reasoning holds", request=AuditJudgmentSerializer,
                   responses={201: OpenApiResponse(description="the verdict, recorded")})
    def post(self, request, item_id: int):
        data = request.data if isinstance(request.data, dict) else {}
        judgment = audit_judge(item_id=item_id, reviewer=request.user, verdict=str(data.get("verdict", "")),
                               rationale=str(data.get("rationale", "")), token=str(data.get("token", "")))
        return Response({"id": judgment.pk, "item": item_id, "verdict": judgment.verdict},
                        status=status.HTTP_201_CREATED)


class EvaluateSerializer(serializers.Serializer):
    checkpoints = serializers.ListField(child=serializers.CharField(), help_text="checkpoint names or ids; the "
                                        "first is the base the others are read against")
    task_set = serializers.CharField(required=False, help_text="a task set's id or name, e.g. held-out variants")
    tasks = serializers.CharField(required=False, help_text="or a task file under the run input folders")
    samples = serializers.IntegerField(required=False, default=1)
    temperature = serializers.FloatField(required=False, default=0.0)
    max_new_tokens = serializers.IntegerField(required=False, default=128)
    seed = serializers.IntegerField(required=False, default=0)
    engine = serializers.CharField(required=False, default="transformers", help_text="transformers, or vllm: vLLM's "
                                   "offline engine in the generation environment (scripts/install_vllm.sh)")


class EvaluateView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Evaluate checkpoints side by side on a task file", request=EvaluateSerializer,
                   responses={202: OpenApiResponse(description="the eval run, queued; poll its url")})
    def post(self, request):
        body = EvaluateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = eval_launch(**body.validated_data, launched_by=request.user)
        return Response(run_payload(run), status=status.HTTP_202_ACCEPTED)


class CheckpointsView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Registered checkpoints", responses={200: OpenApiResponse(description="checkpoints")})
    def get(self, request):
        return Response([checkpoint_summary(c) for c in Checkpoint.objects.order_by("name")])


def checkpoint_or_404(checkpoint_id: int) -> Checkpoint:
    checkpoint = Checkpoint.objects.select_related("parent", "run", "registered_by").filter(pk=checkpoint_id).first()
    if checkpoint is None:
        raise Http404(f"no checkpoint {checkpoint_id}")
    return checkpoint


class CheckpointRenameSerializer(serializers.Serializer):
    """The request body, for the schema; checkpoint_rename checks the name."""

    name = serializers.CharField(help_text="the new name: unique, at most 200 characters, no '=' (compare and "
                                 "evaluate pass NAME=PATH)")


class CheckpointDetailView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="A checkpoint with its lineage: parents, the run that made it, what was trained from it",
                   responses={200: OpenApiResponse(description="the checkpoint")})
    def get(self, request, checkpoint_id: int):
        return Response(checkpoint_payload(checkpoint_or_404(checkpoint_id)))

    @extend_schema(summary="Rename a checkpoint (its origin, path and weights stay as they are)",
                   request=CheckpointRenameSerializer, responses={200: OpenApiResponse(description="the checkpoint")})
    def patch(self, request, checkpoint_id: int):
        checkpoint = checkpoint_or_404(checkpoint_id)
        data = request.data if isinstance(request.data, dict) else None
        if data is None or set(data) != {"name"}:
            raise UserMistake('send a JSON object with the new name only: {"name": "tiny-sft-dpo-beta-0.1"}')
        if not isinstance(data["name"], str):
            raise UserMistake("name must be text, such as tiny-sft-dpo-beta-0.1")
        checkpoint_rename(checkpoint=checkpoint, name=data["name"], by=request.user)
        return Response(checkpoint_payload(checkpoint))
