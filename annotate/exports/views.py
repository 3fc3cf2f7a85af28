"""The exports page of a project (admins and engineers): filters, a preview of the counts, the snapshots."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from annotate.exports import selectors, services
from annotate.exports.api import export_files
from annotate.exports.filters import FIELDS, GOLD_CHOICES, ExportError, ExportFilters, filters_parse
from annotate.exports.models import Export
from annotate.exports.pipeline import export_preview
from annotate.review.selectors import project_for_staff_page
from training.snapshot import FILE_FORMATS, ROW_FORMATS

CHECKBOXES = ("exclude_ties", "exclude_flagged", "exclude_flagged_rationales", "model_scores")
ADJUDICATION_TEXT = (("ignore", "ignore them"), ("split", "decide split pairs"), ("all", "decide every ruled pair"))


def _form_values(post) -> dict:
    """Form fields as filters_parse takes them: empty fields mean the default, unticked boxes mean false."""
    values = {name: post.get(name, "").strip() for name in FIELDS if name not in CHECKBOXES}
    values = {name: value for name, value in values.items() if value != ""}
    for name in CHECKBOXES:
        values[name] = name in post
    return values


def exports_page(request, slug: str):
    project = project_for_staff_page(request, slug, to="export snapshots")
    values = ExportFilters().as_dict()
    preview = error = None
    if request.method == "POST":
        raw = _form_values(request.POST)
        values.update(raw)
        try:
            filters = filters_parse(raw)
            if request.POST.get("action") == "export":
                export = services.export_create(project=project, filters=filters, created_by=request.user)
                messages.success(request, f"Export {export.pk} started.")
                return redirect("exports-page", slug=project.slug)
            preview = export_preview(project=project, filters=filters)
        except ExportError as exc:
            error = str(exc)
    exports = list(selectors.exports_for_project(project=project)[:50])
    rows = [{"export": export, "files": export_files(export)} for export in exports]
    busy = any(export.status in (Export.Status.QUEUED, Export.Status.RUNNING) for export in exports)
    return render(request, "exports/exports.html", {
        "project": project, "values": values, "preview": preview, "error": error, "rows": rows, "busy": busy,
        "gold_choices": GOLD_CHOICES, "row_formats": ROW_FORMATS, "adjudication_choices": ADJUDICATION_TEXT,
        "file_formats": FILE_FORMATS,
    })


def _export_of_project_or_404(project, export_id: int) -> Export:
    export = selectors.export_get(export_id=export_id)
    if export is None or export.project_id != project.pk:
        raise Http404(f"no export {export_id} in {project.slug!r}")
    return export


@require_POST
def export_cancel_page(request, slug: str, export_id: int):
    project = project_for_staff_page(request, slug, to="export snapshots")
    export = _export_of_project_or_404(project, export_id)
    try:
        export = services.export_cancel(export=export, by=request.user)
        messages.success(request, f"Export {export.pk} cancelled." if export.status == Export.Status.CANCELLED
                         else f"Export {export.pk} is stopping; it leaves no folder behind.")
    except ExportError as exc:
        messages.error(request, str(exc))
    return redirect("exports-page", slug=project.slug)


@require_POST
def export_retry_page(request, slug: str, export_id: int):
    project = project_for_staff_page(request, slug, to="export snapshots")
    export = _export_of_project_or_404(project, export_id)
    try:
        services.export_retry(export=export)
        messages.success(request, f"Export {export.pk} queued again.")
    except ExportError as exc:
        messages.error(request, str(exc))
    return redirect("exports-page", slug=project.slug)
