"""Exports in the Django admin: records to read; exports are made from the exports page, the API or the command."""

from django.contrib import admin

from annotate.exports.models import Export


@admin.register(Export)
class ExportAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "status", "snapshot_id", "created_by", "created_at", "finished_at")
    list_filter = ("project", "status")
    search_fields = ("snapshot_id",)
    readonly_fields = [field.name for field in Export._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
