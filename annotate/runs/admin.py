from django.contrib import admin

from annotate.runs.models import Checkpoint, Run


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("name", "uri", "content_hash", "parent", "run", "created_at")
    search_fields = ("name", "uri", "content_hash")
    raw_id_fields = ("parent", "run", "registered_by")

    def get_readonly_fields(self, request, obj=None):
        return ("content_hash", "parent", "run") if obj is not None else ()  # its identity and origin: written once


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "status", "backend", "base_checkpoint", "launched_by", "created_at")
    list_filter = ("kind", "status", "backend")
    raw_id_fields = ("base_checkpoint", "launched_by")
