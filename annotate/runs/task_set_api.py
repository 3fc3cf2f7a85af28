"""Task sets over the API (engineers and admins): list them, make one from the task families (JSON) or from a
project's prompts as open tasks (JSON with `prompts_project`), or upload a task file (multipart field `file`: 202,
checked off the request; GET /api/v1/task-sets/ID shows `checking`, then `ready` or `refused` with its `error`;
DELETE forgets one being checked or refused). The same services as the runs page (annotate/runs/task_sets.py)."""

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.errors import UserMistake
from annotate.parsers import JSONParser
from annotate.permissions import IsAdminOrEngineer
from annotate.runs.models import TaskSet
from annotate.runs.task_sets import (
    task_set_forget,
    task_set_from_prompts,
    task_set_make_checked_later,
    task_set_upload,
)

MAKE_FIELDS = {"families", "variant", "n", "seed", "name"}
PROMPTS_FIELDS = {"prompts_project", "variant", "seed", "test_ratio", "name"}


def task_set_payload(task_set: TaskSet) -> dict:
    return {"id": task_set.pk, "name": task_set.name, "count": task_set.count, "families": task_set.families,
            "variant": task_set.variant or None, "scorers": task_set.scorers, "sha256": task_set.sha256,
            "path": task_set.path, "source": task_set.source, "recipe": task_set.recipe,
            "created_by": task_set.created_by.get_username() if task_set.created_by else None,
            "created_at": task_set.created_at, "status": task_set.status, "error": task_set.error or None}


class TaskSetMakeSerializer(serializers.Serializer):
    """The request body, for the schema; task_set_make_checked_later checks it."""

    families = serializers.ListField(child=serializers.CharField(), help_text="task families, drawn in turn")
    variant = serializers.ChoiceField(["train", "heldout"], required=False, default="train")
    n = serializers.IntegerField(help_text="how many tasks")
    seed = serializers.IntegerField()
    name = serializers.CharField(required=False, help_text="default: families · variant · n · seed")


class TaskSetsView(APIView):
    permission_classes = [IsAdminOrEngineer]
    parser_classes = [JSONParser, MultiPartParser]

    @extend_schema(summary="Task sets the app keeps", responses={200: OpenApiResponse(description="task sets")})
    def get(self, request):
        return Response([task_set_payload(t) for t in TaskSet.records.select_related("created_by").order_by("name")])

    @extend_schema(
        summary="Make a task set from the task families (JSON), from a project's prompts as open tasks (JSON with "
                "`prompts_project`, `variant` all|train|heldout, `seed`, `test_ratio`, `name`), or upload a task file "
                "(multipart `file`, `name`)",
        request={"application/json": TaskSetMakeSerializer,
                 "multipart/form-data": inline_serializer("TaskSetUpload", {"file": serializers.FileField(),
                                                                             "name": serializers.CharField()})},
        responses={201: OpenApiResponse(description="the task set made from a project's prompts, checked"),
                   202: OpenApiResponse(description="the task set made from the families or uploaded, status checking "
                                                    "until the training command's loader has checked it (GET it)"),
                   400: OpenApiResponse(description='{"detail": "FILE: line N: reason; ..."}')})
    def post(self, request):
        if "file" in request.FILES:
            task_set = task_set_upload(upload=request.FILES["file"], name=request.data.get("name"),
                                       created_by=request.user)
            task_set.refresh_from_db()  # checked already where the check runs in-process (the embedded default)
            return Response(task_set_payload(task_set), status=status.HTTP_202_ACCEPTED)
        data = request.data
        if not isinstance(data, dict):
            raise UserMistake("send a JSON object (families, variant, n, seed, name; or prompts_project, variant, seed, "
                              "test_ratio, name) or a multipart file")
        if "prompts_project" in data:
            unknown = sorted(set(data) - PROMPTS_FIELDS)
            if unknown:
                raise UserMistake(f"unknown field {unknown[0]!r}; an open task set from a project's prompts takes "
                                  f"{', '.join(sorted(PROMPTS_FIELDS))}")
            task_set = task_set_from_prompts(project=str(data["prompts_project"] or ""),
                                             variant=str(data.get("variant") or "all"), seed=data.get("seed", 0),
                                             test_ratio=data.get("test_ratio"), name=data.get("name"),
                                             created_by=request.user)
            return Response(task_set_payload(task_set), status=status.HTTP_201_CREATED)
        unknown = sorted(set(data) - MAKE_FIELDS)
        if unknown:
            raise UserMistake(f"unknown field {unknown[0]!r}; a task set is made from {', '.join(sorted(MAKE_FIELDS))}"
                              ", from a project's prompts (prompts_project), or uploaded as the multipart field 'file'")
        families = data.get("families")
        if not isinstance(families, list):
            raise UserMistake('families must be a list of task families, such as ["speed", "code"]')
        task_set = task_set_make_checked_later(families=[str(f) for f in families],
                                               variant=str(data.get("variant") or "train"), n=data.get("n"),
                                               seed=data.get("seed", 0), name=data.get("name"), created_by=request.user)
        task_set.refresh_from_db()  # checked already where its check runs in-process
        return Response(task_set_payload(task_set), status=status.HTTP_202_ACCEPTED)


class TaskSetView(APIView):
    permission_classes = [IsAdminOrEngineer]

    def _task_set(self, pk: int) -> TaskSet:
        task_set = TaskSet.records.select_related("created_by").filter(pk=pk).first()
        if task_set is None:
            raise NotFound(f"no task set {pk}; GET /api/v1/task-sets lists them")
        return task_set

    @extend_schema(summary="A task set: an upload shows status checking, then ready or refused (with its error)",
                   responses={200: OpenApiResponse(description="the task set")})
    def get(self, request, pk: int):
        return Response(task_set_payload(self._task_set(pk)))

    @extend_schema(summary="Forget a task set being checked or refused", responses={204: None})
    def delete(self, request, pk: int):
        task_set_forget(self._task_set(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
