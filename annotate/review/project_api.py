"""Admin API for a project's settings: overlap (fixed or adaptive), leaderboard priority, the qualification
round, gold checks, the rationale flag length and when reviewers see their standing."""

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.permissions import IsAdmin
from annotate.review.errors import ReviewError
from annotate.review.models import Project
from annotate.review.overlap import STOP_RULES
from annotate.review.projects import QUALITY_SETTINGS, project_settings_update
from annotate.review.selectors import project_or_404

QUEUE_SETTINGS = ("overlap", "min_overlap", "max_overlap", "overlap_stop_rule", "leaderboard_priority")
SETTINGS = (*QUEUE_SETTINGS, *QUALITY_SETTINGS)


def project_settings_payload(project: Project) -> dict:
    """`overlap` is the fixed overlap, or with a minimum the maximum (also given as `max_overlap`)."""
    return {
        "overlap": project.overlap,
        "min_overlap": project.min_overlap,
        "max_overlap": project.overlap,
        "adaptive": project.overlap_is_adaptive,
        "overlap_stop_rule": project.overlap_stop_rule,
        "leaderboard_priority": project.leaderboard_priority,
        **{name: getattr(project, name) for name in QUALITY_SETTINGS},
    }


_SETTINGS_SCHEMA = inline_serializer("ProjectSettings", {
    "overlap": serializers.IntegerField(required=False, help_text="A fixed overlap (no minimum)."),
    "min_overlap": serializers.IntegerField(required=False, allow_null=True,
                                            help_text="Adaptive: decided pairs stop here; null: fixed at the maximum."),
    "max_overlap": serializers.IntegerField(required=False, help_text="Adaptive: split pairs get at most this many."),
    "overlap_stop_rule": serializers.ChoiceField(STOP_RULES, required=False),
    "leaderboard_priority": serializers.BooleanField(required=False),
    "rationale_flag_chars": serializers.IntegerField(required=False, help_text="Shorter rationales are flagged; 0: off."),
    "qualification_items": serializers.IntegerField(required=False, help_text="Gold items before live work; 0: none."),
    "qualification_pass_mark": serializers.FloatField(required=False, help_text="Share right to pass, 0-1."),
    "qualification_attempts": serializers.IntegerField(required=False, help_text="Attempts before an admin decides."),
    "gold_rate": serializers.FloatField(required=False, help_text="Share of live items that are gold checks, 0-1."),
    "standing_min_judgments": serializers.IntegerField(required=False,
                                                       help_text="Judgments before reviewers see their standing."),
})


class ProjectSettingsView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(summary="The project's settings", responses={200: _SETTINGS_SCHEMA})
    def get(self, request, slug: str):
        return Response(project_settings_payload(project_or_404(slug)))

    @extend_schema(summary="Change the project's settings", request=_SETTINGS_SCHEMA,
                   responses={200: _SETTINGS_SCHEMA, 400: OpenApiResponse(description='{"detail": "one line"}')})
    def patch(self, request, slug: str):
        project = project_or_404(slug)
        data = request.data
        if not isinstance(data, dict) or not data:
            raise ReviewError(f"send a JSON object with any of {', '.join(SETTINGS)}")
        unknown = sorted(set(data) - set(SETTINGS))
        if unknown:
            raise ReviewError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(SETTINGS)}")
        given = dict(data)
        if "min_overlap" in given and given["min_overlap"] is None:  # back to a fixed overlap
            del given["min_overlap"]
            if "overlap" not in given:
                given["overlap"] = given.pop("max_overlap", project.overlap)
        project = project_settings_update(project=project, **given)
        return Response(project_settings_payload(project))
