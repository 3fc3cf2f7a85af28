"""Agreement report over the API (admins and engineers)."""

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.permissions import IsAdminOrEngineer
from annotate.quality.selectors import agreement_report_for_project
from annotate.review.models import Project

MAX_BOOTSTRAP = 5000


class AgreementReportView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(
        summary="Agreement, reviewer quality and model ratings of a project",
        parameters=[OpenApiParameter("bootstrap", int, description=f"resamples for CIs (0-{MAX_BOOTSTRAP}, default 1000)")],
        responses={200: OpenApiResponse(description="the agreement report (DESIGN.md)")},
    )
    def get(self, request, slug: str):
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise Http404(f"no project {slug!r}")
        raw = request.query_params.get("bootstrap", "1000")
        if not raw.isdigit() or int(raw) > MAX_BOOTSTRAP:
            return Response({"detail": f"bootstrap: {raw!r} must be a whole number from 0 to {MAX_BOOTSTRAP}"}, status=400)
        return Response(agreement_report_for_project(project=project, bootstrap=int(raw)))
