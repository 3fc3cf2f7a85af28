from django import forms
from django.contrib import admin

from annotate.errors import UserMistake
from annotate.runs.checkpoints import checked_name
from annotate.runs.models import Checkpoint, Run, TaskSet


class CheckpointForm(forms.ModelForm):
    def clean_name(self):
        """The one name rule (annotate/runs/checkpoints.py), look-alike names included."""
        try:
            return checked_name(self.cleaned_data.get("name"), other_than=self.instance if self.instance.pk else None)
        except UserMistake as mistake:
            raise forms.ValidationError(str(mistake)) from None


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    form = CheckpointForm
    list_display = ("name", "uri", "content_hash", "parent", "run", "created_at")
    search_fields = ("name", "uri", "content_hash")
    raw_id_fields = ("parent", "run", "registered_by")

    def get_readonly_fields(self, request, obj=None):
        return ("content_hash", "parent", "run") if obj is not None else ()  # its identity and origin: written once


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "status", "backend", "base_checkpoint", "launched_by", "created_at")
    list_filter = ("kind", "status", "backend")
    raw_id_fields = ("base_checkpoint", "launched_by", "export", "task_set")


@admin.register(TaskSet)
class TaskSetAdmin(admin.ModelAdmin):
    """Made or uploaded on the runs page (or the API), where the file is checked; here only its name changes."""

    list_display = ("name", "count", "variant", "source", "sha256", "created_by", "created_at")
    list_filter = ("source", "variant")
    search_fields = ("name", "sha256")
    readonly_fields = ("path", "sha256", "count", "variant", "families", "scorers", "source", "recipe", "created_by",
                       "status", "error")

    def has_add_permission(self, request) -> bool:
        return False
