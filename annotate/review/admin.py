"""Django admin for projects, criteria, prompts and responses, with an import upload per project."""

from django import forms
from django.contrib import admin, messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse

from annotate.review.import_sql import items_import_file
from annotate.review.importing import ImportRejected
from annotate.review.models import Assignment, CriteriaVersion, Judgment, Pair, Project, Prompt, Response
from annotate.review.projects import project_queue_settings_applied


class ImportItemsForm(forms.Form):
    file = forms.FileField(help_text="JSONL, one prompt a line (see the import format in the docs).")


class CriteriaVersionInline(admin.TabularInline):
    model = CriteriaVersion
    extra = 0
    readonly_fields = ("version", "instructions", "items", "created_at")
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # a new version comes from a criteria file: manage.py create_project


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "overlap", "min_overlap", "retest_rate", "created_at")
    inlines = [CriteriaVersionInline]
    change_form_template = "admin/review/project/change_form.html"

    # Changing these decides again what every started pair needs (Project.clean refuses bad combinations).
    QUEUE_FIELDS = ("overlap", "min_overlap", "overlap_stop_rule", "leaderboard_priority")

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        changed = [name for name in self.QUEUE_FIELDS if name in form.changed_data]
        if change and changed:
            project_queue_settings_applied(project=obj, changed=changed)

    def get_urls(self):
        return [
            path("<id:project_id>/import/", self.admin_site.admin_view(self.import_items_view), name="review_project_import"),
            *super().get_urls(),
        ]

    def import_items_view(self, request, project_id: int):
        project = get_object_or_404(Project, pk=project_id)
        form = ImportItemsForm(request.POST or None, request.FILES or None)
        errors: list[str] = []
        if request.method == "POST" and form.is_valid():
            try:
                summary = items_import_file(project=project, lines=form.cleaned_data["file"].file)
            except ImportRejected as exc:
                errors = exc.errors
            else:
                messages.success(
                    request,
                    f"Imported {summary.prompts_created} new prompt(s), {summary.responses_created} response(s), "
                    f"{summary.pairs_created} pair(s).",
                )
                return redirect(reverse("admin:review_project_change", args=[project.pk]))
        context = {**self.admin_site.each_context(request), "project": project, "form": form, "errors": errors,
                   "opts": self.model._meta, "title": f"Import items into {project.name}"}
        return render(request, "admin/review/project/import.html", context)


class ResponseInline(admin.TabularInline):
    model = Response
    extra = 0
    fields = ("model", "model_version", "text")
    readonly_fields = ("model", "model_version", "text")


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("external_id", "project", "created_at")
    list_filter = ("project",)
    search_fields = ("external_id",)
    inlines = [ResponseInline]
    raw_id_fields = ("gold_response",)


@admin.register(Response)
class ResponseAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt", "model", "model_version")
    list_filter = ("model", "model_version")
    search_fields = ("prompt__external_id", "text")


@admin.register(Pair)
class PairAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "prompt", "assigned_count")
    list_filter = ("project",)
    raw_id_fields = ("prompt", "response_a", "response_b")


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Judgments and assignments are records: admins read them; the workflow writes them."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Assignment)
class AssignmentAdmin(_ReadOnlyAdmin):
    list_display = ("id", "project", "pair", "reviewer", "status", "is_retest", "a_on_left", "expires_at")
    list_filter = ("project", "status", "is_retest")


@admin.register(Judgment)
class JudgmentAdmin(_ReadOnlyAdmin):
    list_display = ("id", "pair", "reviewer", "revision", "retracted", "winner", "strength", "created_at")
    list_filter = ("retracted", "winner")
