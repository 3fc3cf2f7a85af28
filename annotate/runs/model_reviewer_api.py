"""Model reviewers over the API: admins and engineers read them, admins attach, change, score again and detach
(annotate/runs/model_reviewer_scoring.py, annotate/quality/model_reviewers.py; docs/agreement.md, "A model
reviewer")."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.permissions import IsAdmin, IsAdminOrEngineer
from annotate.quality.model_reviewers import (
    UNCHANGED,
    ModelReviewerMistake,
    model_reviewer_change,
    model_reviewer_detach,
    model_reviewer_summaries,
    model_reviewer_summary,
)
from annotate.quality.models import ModelReviewer
from annotate.review.selectors import project_or_404
from annotate.runs.model_reviewer_scoring import (
    DEFAULT_DISAGREEMENT_THRESHOLD,
    model_reviewer_attach,
    model_reviewer_score_again,
)

ATTACH_FIELDS = {"checkpoint", "offer_disagreements", "disagreement_threshold"}
CHANGE_FIELDS = {"offer_disagreements", "disagreement_threshold"}


def _body(request, allowed: set[str], *, what: str) -> dict:
    data = request.data
    if not isinstance(data, dict):
        raise ModelReviewerMistake(f"send a JSON object with {', '.join(sorted(allowed))}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ModelReviewerMistake(f"unknown field {unknown[0]!r}; {what} takes {', '.join(sorted(allowed))}")
    return data


class _AdminWrites(APIView):
    """Reading is for admins and engineers, as the quality dashboard; every write is an admin's."""

    def get_permissions(self):
        return [IsAdminOrEngineer() if self.request.method == "GET" else IsAdmin()]


class ModelReviewersView(_AdminWrites):
    @extend_schema(summary="A project's model reviewers and their figures against the people",
                   responses={200: OpenApiResponse(description="one entry per attached model reviewer")})
    def get(self, request, slug: str):
        return Response(model_reviewer_summaries(project=project_or_404(slug)))

    @extend_schema(
        summary="Attach a reward-model checkpoint to the project as a model reviewer (admins); scoring is queued",
        request=inline_serializer("ModelReviewerAttach", {
            "checkpoint": serializers.CharField(help_text="a registered reward model's id or name"),
            "offer_disagreements": serializers.BooleanField(required=False, default=False),
            "disagreement_threshold": serializers.FloatField(required=False, default=1.0)}),
        responses={201: OpenApiResponse(description="the model reviewer"),
                   400: OpenApiResponse(description='{"detail": "..."}: not a reward model, unknown checkpoint, '
                                                    'no judged pairs, attached already, a null or bad setting')})
    def post(self, request, slug: str):
        project = project_or_404(slug)
        data = _body(request, ATTACH_FIELDS, what="attaching a model reviewer")
        if "checkpoint" not in data:
            raise ModelReviewerMistake("checkpoint: give the id or name of a registered reward-model checkpoint")
        reviewer = model_reviewer_attach(
            project=project, checkpoint=data["checkpoint"], created_by=request.user,
            offer_disagreements=data.get("offer_disagreements", False),
            disagreement_threshold=data.get("disagreement_threshold", DEFAULT_DISAGREEMENT_THRESHOLD))
        return Response(model_reviewer_summary(reviewer=ModelReviewer.objects.get(pk=reviewer.pk)),
                        status=status.HTTP_201_CREATED)


def _attached(reviewer_id: int) -> ModelReviewer:
    return get_object_or_404(ModelReviewer.objects.select_related("project", "checkpoint", "created_by"),
                             pk=reviewer_id, detached_at__isnull=True)


class ModelReviewerDetailView(_AdminWrites):
    @extend_schema(summary="One model reviewer and its figures", responses={200: OpenApiResponse(description="it")})
    def get(self, request, reviewer_id: int):
        return Response(model_reviewer_summary(reviewer=_attached(reviewer_id)))

    @extend_schema(
        summary="Change whether its confident disagreements get one more reviewer, and above which score difference",
        request=inline_serializer("ModelReviewerChange", {
            "offer_disagreements": serializers.BooleanField(required=False),
            "disagreement_threshold": serializers.FloatField(required=False)}),
        responses={200: OpenApiResponse(description="the model reviewer"),
                   400: OpenApiResponse(description='{"detail": "..."}: a setting that is null, not true or false, '
                                                    'or not a number from 0 to 1000')})
    def patch(self, request, reviewer_id: int):
        data = _body(request, CHANGE_FIELDS, what="a model reviewer's settings")
        # A field left out keeps its setting; null is refused like any other value that is not one.
        reviewer = model_reviewer_change(reviewer=_attached(reviewer_id),
                                         offer_disagreements=data.get("offer_disagreements", UNCHANGED),
                                         disagreement_threshold=data.get("disagreement_threshold", UNCHANGED))
        return Response(model_reviewer_summary(reviewer=reviewer))

    @extend_schema(summary="Detach it: it leaves the dashboard and exports; its scores are kept",
                   responses={204: OpenApiResponse(description="detached")})
    def delete(self, request, reviewer_id: int):
        model_reviewer_detach(reviewer=_attached(reviewer_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelReviewerScoreView(_AdminWrites):
    @extend_schema(summary="Score every judged pair again (after a failure, or after new judgments)",
                   request=None, responses={202: OpenApiResponse(description="the model reviewer"),
                                            409: OpenApiResponse(description="it is queued or scoring now (and "
                                                                             "has reported within the stale limit)")})
    def post(self, request, reviewer_id: int):
        reviewer = model_reviewer_score_again(reviewer=_attached(reviewer_id))
        return Response(model_reviewer_summary(reviewer=reviewer), status=status.HTTP_202_ACCEPTED)
