"""Snapshot exports over the API (admins and engineers): start, preview, poll, cancel, retry, download."""

from pathlib import Path

from django.http import FileResponse, Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.exports import selectors, services
from annotate.exports.filters import ADJUDICATION_CHOICES, GOLD_CHOICES, filters_parse
from annotate.exports.models import Export
from annotate.exports.pipeline import export_preview
from annotate.permissions import IsAdminOrEngineer
from annotate.review.selectors import project_or_404
from training.snapshot import FILE_FORMATS, MANIFEST, ROW_FORMATS, SnapshotError, read_manifest


class ExportFiltersSerializer(serializers.Serializer):
    """The request body, for the schema: `filters_parse` validates it (unknown keys are an error)."""

    min_judgments = serializers.IntegerField(required=False, help_text="votes a pair needs (default 1)")
    min_agreement = serializers.FloatField(required=False, help_text="share of votes for the majority, 0-1")
    exclude_ties = serializers.BooleanField(required=False, help_text="drop pairs with any tie or both_bad vote")
    criteria_versions = serializers.ListField(child=serializers.IntegerField(), required=False,
                                              help_text="count only judgments under these versions")
    tags = serializers.ListField(child=serializers.CharField(), required=False,
                                 help_text="keep prompts with at least one of these tags")
    judged_since = serializers.DateField(required=False, help_text="first day of judgments counted (UTC)")
    judged_until = serializers.DateField(required=False, help_text="last day of judgments counted (UTC)")
    exclude_flagged = serializers.BooleanField(required=False, help_text="leave out flagged reviewers' judgments")
    exclude_flagged_rationales = serializers.BooleanField(
        required=False, help_text="leave out judgments whose rationale has a rationale-check flag")
    adjudications = serializers.ChoiceField(ADJUDICATION_CHOICES, required=False,
                                            help_text="rulings: ignore (default), decide split pairs, or all ruled pairs")
    gold = serializers.ChoiceField(GOLD_CHOICES, required=False, help_text="gold prompts: include, exclude, only")
    max_pairs_per_prompt = serializers.IntegerField(required=False, allow_null=True)
    test_ratio = serializers.FloatField(required=False, help_text="share of prompts in the test split (0.1)")
    seed = serializers.IntegerField(required=False, help_text="seed of the split (0)")
    row_format = serializers.ChoiceField(ROW_FORMATS, required=False)
    file_format = serializers.ChoiceField(FILE_FORMATS, required=False)


def _export_or_404(export_id: int) -> Export:
    export = selectors.export_get(export_id=export_id)
    if export is None:
        raise Http404(f"no export {export_id}")
    return export


def export_files(export: Export) -> list[str]:
    """The files of a finished snapshot, manifest first; none while it is not done or if it is gone."""
    if export.status != Export.Status.DONE:
        return []
    try:
        manifest = read_manifest(export.out_dir)
    except SnapshotError:
        return []
    return [MANIFEST, *sorted(manifest["files"])]


def export_payload(export: Export, request) -> dict:
    def url(name: str, *args) -> str:
        return request.build_absolute_uri(reverse(name, args=args))

    return {
        "id": export.pk,
        "url": url("export-detail", export.pk),
        "project": export.project.slug,
        "status": export.status,
        "stage": export.stage,
        "progress": {"pairs_done": export.pairs_done, "pairs_total": export.pairs_total},
        "filters": export.filters,
        "snapshot_id": export.snapshot_id or None,
        "path": export.out_dir,
        "counts": export.counts,
        "error": export.error or None,
        "cancel_requested": export.cancel_requested,
        "cancelled_by": export.cancelled_by.get_username() if export.cancelled_by else None,
        "attempt": export.attempt,
        "created_by": export.created_by.get_username() if export.created_by else None,
        "created_at": export.created_at,
        "started_at": export.started_at,
        "finished_at": export.finished_at,
        "files": {name: url("export-file", export.pk, name) for name in export_files(export)},
    }


class ProjectExportsView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Start a snapshot export", request=ExportFiltersSerializer,
                   responses={202: OpenApiResponse(description="the export: id, status, progress; poll its url")})
    def post(self, request, slug: str):
        project = project_or_404(slug)
        filters = filters_parse(request.data)
        export = services.export_create(project=project, filters=filters, created_by=request.user)
        export = selectors.export_get(export_id=export.pk)  # with no broker it has already run
        return Response(export_payload(export, request), status=status.HTTP_202_ACCEPTED)

    @extend_schema(summary="The project's exports, newest first",
                   responses={200: OpenApiResponse(description="a list of exports")})
    def get(self, request, slug: str):
        project = project_or_404(slug)
        return Response([export_payload(e, request) for e in selectors.exports_for_project(project=project)])


class ExportPreviewView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="The counts an export with these filters would get; writes nothing",
                   request=ExportFiltersSerializer,
                   responses={200: OpenApiResponse(description="train/test rows, prompts, exclusions by reason")})
    def post(self, request, slug: str):
        project = project_or_404(slug)
        filters = filters_parse(request.data)
        return Response(export_preview(project=project, filters=filters))


class ExportDetailView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="An export's status and progress",
                   responses={200: OpenApiResponse(
                       description="status queued|running|done|failed|cancelled, progress, files")})
    def get(self, request, export_id: int):
        return Response(export_payload(_export_or_404(export_id), request))


class ExportCancelView(APIView):
    # Whoever may start an export may stop one (the wrong filters are noticed once it runs).
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Cancel a queued or running export", request=None,
                   responses={202: OpenApiResponse(description="the export: a queued one cancelled, a running one "
                                                               "stops at its next heartbeat and leaves no folder"),
                              409: OpenApiResponse(description="the export has already ended")})
    def post(self, request, export_id: int):
        export = services.export_cancel(export=_export_or_404(export_id), by=request.user)
        return Response(export_payload(export, request), status=status.HTTP_202_ACCEPTED)


class ExportRetryView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Run a failed export again", request=None,
                   responses={202: OpenApiResponse(description="the export, queued again")})
    def post(self, request, export_id: int):
        export = services.export_retry(export=_export_or_404(export_id))
        return Response(export_payload(selectors.export_get(export_id=export.pk), request),
                        status=status.HTTP_202_ACCEPTED)


class ExportFileView(APIView):
    permission_classes = [IsAdminOrEngineer]

    @extend_schema(summary="Download one file of a finished snapshot",
                   responses={200: OpenApiResponse(description="the file")})
    def get(self, request, export_id: int, name: str):
        export = _export_or_404(export_id)
        if name not in export_files(export):
            raise Http404(f"export {export_id} has no file {name!r}; its files are listed at its url")
        return FileResponse(open(Path(export.out_dir) / name, "rb"), as_attachment=True,  # FileResponse closes it
                            filename=f"{export.snapshot_id}-{name}")
