"""Agreement report over the API (admins and engineers): the stored report, or a fresh one on request; and a
reviewer's own standing, from the stored report."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.limits import whole_number
from annotate.permissions import CanReview, IsAdminOrEngineer
from annotate.quality import services
from annotate.quality.selectors import agreement_report_for_project
from annotate.quality.standing import reviewer_standing
from annotate.review.selectors import project_or_404

MAX_BOOTSTRAP = 5000
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


class AgreementReportView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(
        summary="Agreement, reviewer quality and model ratings of a project",
        description=(
            "The project's stored report (docs/agreement.md) with computed_at, stale, judgments_since and "
            "recomputing. A stale report is served as it is while a recompute is queued; fresh=true computes "
            "and stores one now. A bootstrap other than the stored report's is computed now and not stored."
        ),
        parameters=[
            OpenApiParameter("fresh", bool, description="compute the report now and store it (default false)"),
            OpenApiParameter(
                "bootstrap", int,
                description=f"resamples for CIs (0-{MAX_BOOTSTRAP}, default {services.STORED_BOOTSTRAP})",
            ),
        ],
        responses={200: OpenApiResponse(description="the agreement report and how current it is")},
    )
    def get(self, request, slug: str):
        project = project_or_404(slug)
        bootstrap = whole_number("bootstrap", request.query_params.get("bootstrap", str(services.STORED_BOOTSTRAP)),
                                 low=0, high=MAX_BOOTSTRAP)
        raw_fresh = request.query_params.get("fresh", "false").lower()
        if raw_fresh not in _TRUE + _FALSE:
            return Response({"detail": f"fresh: {raw_fresh!r} must be true or false"}, status=400)

        if bootstrap != services.STORED_BOOTSTRAP:
            report = agreement_report_for_project(project=project, bootstrap=bootstrap)
            freshness = {"computed_at": timezone.now().isoformat(), "stale": False, "judgments_since": 0,
                         "recomputing": False, "stored": False}
            return Response({**report, **freshness})
        state = services.stored_report_read(project=project, schedule=False)
        if raw_fresh in _TRUE or state.report is None:
            # Asked for, or nothing stored yet: a client of the API wants figures, not a promise of them.
            services.stored_report_refresh(project=project)
            state = services.stored_report_read(project=project, schedule=False)
        elif state.stale:
            state = services.stored_report_read(project=project)  # queues one recompute
        return Response({**state.report, **state.freshness(), "stored": True})


class StandingView(APIView):
    permission_classes = [CanReview]

    @extend_schema(summary="The reviewer's own standing in the project",
                   responses={200: OpenApiResponse(description="judged, qualification, and once enough are "
                                                               "judged: gold accuracy, retest consistency, "
                                                               "agreement with others")})
    def get(self, request, slug: str):
        project = project_or_404(slug, prepared=True)
        return Response(reviewer_standing(project=project, reviewer=request.user))
