"""Reviewer and admin API for review work (under /api/v1/)."""

import uuid

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.permissions import CanReview, IsAdmin
from annotate.review import selectors, services
from annotate.review.importing import ImportRejected


def _project_or_404(slug: str):
    project = selectors.project_for_reviewer(slug=slug)
    if project is None:
        raise Http404(f"no project {slug!r}")
    return project


class JudgmentInSerializer(serializers.Serializer):
    """The submitted judgment, for the OpenAPI schema; `judgment_input` checks it on the hot path."""

    choice = serializers.CharField(help_text="left, right, tie or both_bad")
    strength = serializers.IntegerField(required=False, allow_null=True, help_text="1-3; needed for left/right")
    criteria = serializers.DictField(child=serializers.CharField(), help_text='{"<key>": "left|right|tie"}')
    rationale = serializers.CharField(allow_blank=True, trim_whitespace=False)
    client_key = serializers.UUIDField(help_text="A fresh UUID per judgment; a retry with the same key is not a second judgment.")


def judgment_input(data) -> dict:
    """The judgment's fields with their shapes checked; services.judgment_submit checks their values.

    Plain checks rather than a DRF serializer: this runs on every judgment, and a serializer costs more
    than the rest of the request's Python.
    """
    if not isinstance(data, dict):
        raise services.ReviewError("send a JSON object with choice, strength, criteria, rationale and client_key")
    for name in ("choice", "criteria", "rationale", "client_key"):
        if name not in data:
            raise services.ReviewError(f"{name}: this field is required")
    strength = data.get("strength")
    if isinstance(strength, str) and strength.strip().isdigit():
        strength = int(strength)
    try:
        client_key = uuid.UUID(str(data["client_key"]))
    except ValueError:
        raise services.ReviewError(
            f"client_key: {data['client_key']!r} is not a UUID; send a fresh UUID per judgment"
        ) from None
    return {"choice": data["choice"], "strength": strength, "criteria": data["criteria"],
            "rationale": data["rationale"], "client_key": client_key}


class AssignmentNextView(APIView):
    permission_classes = [CanReview]
    parser_classes = [JSONParser]

    @extend_schema(
        summary="The reviewer's next assignment",
        responses={200: OpenApiResponse(description="prompt, criteria, left and right answers, progress"),
                   204: OpenApiResponse(description="nothing is left for this reviewer")},
    )
    def get(self, request, slug: str):
        project = _project_or_404(slug)
        assignment = services.assignment_next(project=project, reviewer=request.user)
        if assignment is None:
            progress = selectors.reviewer_progress(project=project, reviewer=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT, headers={"X-Judged": str(progress["judged"])})
        return Response(selectors.assignment_payload(assignment=assignment, project=project, reviewer=request.user))


class JudgmentSubmitView(APIView):
    permission_classes = [CanReview]
    parser_classes = [JSONParser]

    @extend_schema(summary="Judge an assignment", request=JudgmentInSerializer,
                   responses={201: OpenApiResponse(description="the judgment, as left/right")})
    def post(self, request, assignment_id: int):
        judgment, replayed = services.judgment_submit(
            assignment_id=assignment_id, reviewer=request.user, **judgment_input(request.data)
        )
        body = selectors.judgment_payload(judgment=judgment, a_on_left=judgment.assignment.a_on_left)
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)


class JudgmentUndoView(APIView):
    permission_classes = [CanReview]

    @extend_schema(summary="Undo the reviewer's last judgment in the project", request=None,
                   responses={200: OpenApiResponse(description="the assignment, open again")})
    def post(self, request, slug: str):
        project = _project_or_404(slug)
        assignment = services.judgment_undo_last(project=project, reviewer=request.user)
        return Response(selectors.assignment_payload(assignment=assignment, project=project, reviewer=request.user))


class ItemsImportView(APIView):
    """POST a JSONL file (multipart field `file`, or the raw body) of prompts and answers."""

    permission_classes = [IsAdmin]
    parser_classes = [MultiPartParser]

    @extend_schema(
        summary="Import prompts with their answers (JSONL)",
        request={"multipart/form-data": inline_serializer("ItemsUpload", {"file": serializers.FileField()})},
        responses={201: OpenApiResponse(description="what was stored"),
                   400: OpenApiResponse(description='{"detail", "errors": ["line N: reason", ...]}')},
    )
    def post(self, request, slug: str):
        project = _project_or_404(slug)
        upload = request.FILES.get("file")
        if upload is None:
            return Response({"detail": "file: attach the JSONL file as the multipart field 'file'"}, status=400)
        try:
            # The raw bytes, line by line: a line that is not UTF-8 is reported with its number.
            summary = services.items_import_file(project=project, lines=upload.file)
        except ImportRejected as exc:
            return Response({"detail": f"the file was rejected whole, nothing was stored: {len(exc.errors)} error(s)",
                             "errors": exc.errors}, status=400)
        return Response(summary.__dict__, status=201)
