"""Reviewer, adjudicator and admin API for review work (under /api/v1/)."""

import uuid

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.api_errors import MAX_ID
from annotate.limits import whole_number
from annotate.parsers import JSONParser
from annotate.permissions import CanAdjudicate, CanReview, IsAdmin, IsAdminOrEngineer
from annotate.review import adjudication, selectors
from annotate.review.assignments import assignment_next_in_project
from annotate.review.errors import ReviewError
from annotate.review.import_sql import items_import_file
from annotate.review.importing import ImportRejected
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.qualification import QUALIFICATION_ACTIONS, qualification_release, qualification_state
from annotate.review.rationale import typing_parse


class JudgmentInSerializer(serializers.Serializer):
    """The submitted judgment, for the OpenAPI schema; `judgment_input` checks it on the hot path."""

    choice = serializers.CharField(help_text="left, right, tie or both_bad")
    strength = serializers.IntegerField(required=False, allow_null=True, help_text="1-3; needed for left/right")
    criteria = serializers.DictField(child=serializers.CharField(), help_text='{"<key>": "left|right|tie"}')
    rationale = serializers.CharField(allow_blank=True, trim_whitespace=False)
    client_key = serializers.UUIDField(help_text="A fresh UUID per judgment; a retry with the same key is not a second judgment.")
    typing = serializers.DictField(
        required=False, allow_null=True,
        help_text="What the page saw of the rationale being written, counts only: typing_seconds, typed_chars, "
                  "pasted_chars, paste_events. Without it a rationale is never flagged as pasted.",
    )


def judgment_input(data) -> dict:
    """The judgment's fields with their shapes checked; judgment_submit checks their values.

    Plain checks rather than a DRF serializer: this runs on every judgment, and a serializer costs more
    than the rest of the request's Python.
    """
    if not isinstance(data, dict):
        raise ReviewError("send a JSON object with choice, strength, criteria, rationale and client_key")
    for name in ("choice", "criteria", "rationale", "client_key"):
        if name not in data:
            raise ReviewError(f"{name}: this field is required")
    strength = data.get("strength")
    if isinstance(strength, str):  # a form-minded client's "2"; never "²" or "٣" (see whole_number)
        strength = whole_number("strength", strength, low=1, high=3, error=ReviewError)
    try:
        client_key = uuid.UUID(str(data["client_key"]))
    except ValueError:
        raise ReviewError(
            f"client_key: {data['client_key']!r} is not a UUID; send a fresh UUID per judgment"
        ) from None
    return {"choice": data["choice"], "strength": strength, "criteria": data["criteria"],
            "rationale": data["rationale"], "client_key": client_key, "typing": typing_parse(data.get("typing"))}


class AssignmentNextView(APIView):
    permission_classes = [CanReview]
    parser_classes = [JSONParser]

    @extend_schema(
        summary="The reviewer's next assignment",
        responses={200: OpenApiResponse(description="prompt, criteria, left and right answers, progress"),
                   204: OpenApiResponse(description="nothing is left for this reviewer")},
    )
    def get(self, request, slug: str):
        # The project is read with the reviewer's queue lock, in one statement (selectors.project_or_404 otherwise).
        project, assignment = assignment_next_in_project(slug=slug, reviewer=request.user)
        if project is None:
            raise selectors.project_not_found(slug)
        if assignment is None:
            progress = selectors.reviewer_progress(project=project, reviewer=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT, headers={"X-Judged": str(progress["judged"])})
        return Response(selectors.assignment_payload(assignment=assignment, project=project, reviewer=request.user))


class JudgmentSubmitView(APIView):
    permission_classes = [CanReview]
    parser_classes = [JSONParser]

    @extend_schema(summary="Judge an assignment", request=JudgmentInSerializer,
                   responses={201: OpenApiResponse(description="the judgment, as left/right; for an item of the "
                                                               "qualification round, `feedback` too")})
    def post(self, request, assignment_id: int):
        judgment, replayed = judgment_submit(
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
        project = selectors.project_or_404(slug, prepared=True)
        assignment = judgment_undo_last(project=project, reviewer=request.user)
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
        project = selectors.project_or_404(slug, prepared=True)
        upload = request.FILES.get("file")
        if upload is None:
            return Response({"detail": "file: attach the JSONL file as the multipart field 'file'"}, status=400)
        try:
            # The raw bytes, line by line: a line that is not UTF-8 is reported with its number.
            summary = items_import_file(project=project, lines=upload.file)
        except ImportRejected as exc:
            return Response({"detail": f"the file was rejected whole, nothing was stored: {len(exc.errors)} error(s)",
                             "errors": exc.errors}, status=400)
        return Response(summary.__dict__, status=201)


# --- the qualification round ---------------------------------------------------------------------------


class QualificationView(APIView):
    """GET: every reviewer's qualification results (admins, engineers). POST: let a held reviewer go on (admins)."""

    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "POST" else [IsAdminOrEngineer()]

    @extend_schema(summary="Qualification results of the project's reviewers",
                   responses={200: OpenApiResponse(description="per reviewer: status, attempts, live gold checks")})
    def get(self, request, slug: str):
        project = selectors.project_or_404(slug, prepared=True)
        return Response({"required": bool(project.qualification_items),
                         "items": project.qualification_items, "pass_mark": project.qualification_pass_mark,
                         "attempts": project.qualification_attempts, "gold_rate": project.gold_rate,
                         "reviewers": selectors.qualification_results(project=project)})

    @extend_schema(summary="Let a reviewer try the qualification round again, or pass them",
                   request=inline_serializer("QualificationRelease", {
                       "username": serializers.CharField(), "action": serializers.ChoiceField(QUALIFICATION_ACTIONS)}),
                   responses={201: OpenApiResponse(description="the reviewer's new attempt")})
    def post(self, request, slug: str):
        project = selectors.project_or_404(slug, prepared=True)
        data = request.data if isinstance(request.data, dict) else {}
        username = data.get("username")
        reviewer = get_user_model().objects.filter(username=username).first() if isinstance(username, str) else None
        if reviewer is None:
            raise ReviewError(f"username: no user {username!r}", status=404)
        attempt = qualification_release(project=project, reviewer=reviewer, action=data.get("action"),
                                        admin=request.user)
        return Response(qualification_state(project=project, reviewer=reviewer) | {"attempt": attempt.number},
                        status=status.HTTP_201_CREATED)


# --- adjudication ----------------------------------------------------------------------------------


class AdjudicationNextView(APIView):
    permission_classes = [CanAdjudicate]

    @extend_schema(
        summary="The adjudicator's next split pair",
        parameters=[
            OpenApiParameter("min_judgments", int, description="counted votes a pair needs (default: the overlap)"),
            OpenApiParameter("max_share", float, description="also pairs whose majority has at most this share"),
            OpenApiParameter("tag", str, description="only prompts with this tag"),
            OpenApiParameter("pair", int, description="this pair, whatever its votes (to rule on it again)"),
        ],
        responses={200: OpenApiResponse(description="the pair in the adjudicator's order, every reviewer's "
                                                    "judgment in that order, earlier rulings, the queue"),
                   204: OpenApiResponse(description="no pair waits")},
    )
    def get(self, request, slug: str):
        project = selectors.project_or_404(slug, prepared=True)
        queue = adjudication.queue_filter_parse(request.query_params, project=project)
        raw_pair = request.query_params.get("pair")
        pair_id = (whole_number("pair", raw_pair, low=1, high=MAX_ID, error=ReviewError)
                   if raw_pair not in (None, "") else None)
        assignment = adjudication.adjudication_next(
            project=project, adjudicator=request.user, queue=queue, pair_id=pair_id)
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(adjudication.adjudication_payload(assignment=assignment, queue=queue))


class RulingSubmitView(APIView):
    permission_classes = [CanAdjudicate]
    parser_classes = [JSONParser]

    @extend_schema(
        summary="Rule on the pair of an adjudication",
        request=inline_serializer("RulingIn", {
            "choice": serializers.CharField(help_text="left, right, tie or both_bad, as the adjudicator sees them"),
            "strength": serializers.IntegerField(required=False, allow_null=True),
            "criteria": serializers.DictField(required=False, child=serializers.CharField()),
            "rationale": serializers.CharField(),
            "client_key": serializers.UUIDField(),
        }),
        responses={201: OpenApiResponse(description="the ruling, as left/right")},
    )
    def post(self, request, adjudication_id: int):
        data = request.data
        if not isinstance(data, dict):
            raise ReviewError("send a JSON object with choice, strength, rationale and client_key")
        for name in ("choice", "rationale", "client_key"):
            if name not in data:
                raise ReviewError(f"{name}: this field is required")
        try:
            client_key = uuid.UUID(str(data["client_key"]))
        except ValueError:
            raise ReviewError(f"client_key: {data['client_key']!r} is not a UUID") from None
        ruling, replayed = adjudication.ruling_submit(
            assignment_id=adjudication_id, adjudicator=request.user, choice=data["choice"],
            strength=data.get("strength"), criteria=data.get("criteria"), rationale=data["rationale"],
            client_key=client_key,
        )
        body = adjudication.ruling_payload(ruling=ruling, a_on_left=ruling.assignment.a_on_left)
        return Response(body, status=status.HTTP_201_CREATED,
                        headers={"Idempotent-Replayed": "true"} if replayed else {})


class AdjudicationListView(APIView):
    permission_classes = [CanAdjudicate]

    @extend_schema(summary="The project's rulings, newest first, and how many pairs wait",
                   responses={200: OpenApiResponse(description="waiting, rulings[] (un-swapped: a/b)")})
    def get(self, request, slug: str):
        project = selectors.project_or_404(slug, prepared=True)
        queue = adjudication.queue_filter_parse(request.query_params, project=project)
        return Response({**adjudication.waiting_count(project=project, adjudicator=request.user, queue=queue),
                         "filter": queue.as_dict(), "rulings": adjudication.rulings_list(project=project)})
