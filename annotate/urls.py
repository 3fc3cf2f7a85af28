from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView

from annotate import api_errors, home, login_throttle
from annotate.exports import api as exports_api
from annotate.exports import views as exports_views
from annotate.quality import api as quality_api
from annotate.quality import views as quality_views
from annotate.review import api as review_api
from annotate.review import project_api
from annotate.review import views as review_views


class IdConverter:
    """A row id: 1 to 2^63-1 (PostgreSQL's bigint), so a huge or negative id in a path is 404, not 500."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= api_errors.MAX_ID:
            raise ValueError(f"{value} is not a row id")  # Django answers 404: the path matches nothing
        return number

    def to_url(self, value: int) -> str:
        return str(value)


# Every id in a path uses `id`, never Django's unbounded `int` (tests/security checks each pattern).
register_converter(IdConverter, "id")

api_v1 = [
    path("projects/<slug:slug>/assignments/next", review_api.AssignmentNextView.as_view(), name="assignment-next"),
    path("assignments/<id:assignment_id>/judgment", review_api.JudgmentSubmitView.as_view(), name="judgment-submit"),
    path("projects/<slug:slug>/judgments/undo", review_api.JudgmentUndoView.as_view(), name="judgment-undo"),
    path("projects/<slug:slug>/items", review_api.ItemsImportView.as_view(), name="items-import"),
    path("projects/<slug:slug>/settings", project_api.ProjectSettingsView.as_view(), name="project-settings"),
    path("projects/<slug:slug>/standing", quality_api.StandingView.as_view(), name="reviewer-standing"),
    path("projects/<slug:slug>/qualification", review_api.QualificationView.as_view(), name="qualification"),
    path("projects/<slug:slug>/adjudications/next", review_api.AdjudicationNextView.as_view(), name="adjudication-next"),
    path("projects/<slug:slug>/adjudications", review_api.AdjudicationListView.as_view(), name="adjudications"),
    path("adjudications/<id:adjudication_id>/ruling", review_api.RulingSubmitView.as_view(), name="ruling-submit"),
    path("projects/<slug:slug>/agreement", quality_api.AgreementReportView.as_view(), name="agreement-report"),
    path("projects/<slug:slug>/exports", exports_api.ProjectExportsView.as_view(), name="project-exports"),
    path("projects/<slug:slug>/exports/preview", exports_api.ExportPreviewView.as_view(), name="export-preview"),
    path("exports/<id:export_id>", exports_api.ExportDetailView.as_view(), name="export-detail"),
    path("exports/<id:export_id>/cancel", exports_api.ExportCancelView.as_view(), name="export-cancel"),
    path("exports/<id:export_id>/retry", exports_api.ExportRetryView.as_view(), name="export-retry"),
    path("exports/<id:export_id>/files/<str:name>", exports_api.ExportFileView.as_view(), name="export-file"),
    path("", include("annotate.runs.model_reviewer_api_urls")),
]

# The API first, and the reviewer queue's two routes first within it: Django tries patterns in order,
# and these two are most of all requests.
urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("", home.home, name="home"),
    path("review/<slug:slug>/", review_views.review_page, name="review"),
    path("adjudicate/<slug:slug>/", review_views.adjudicate_page, name="adjudicate"),
    path("projects/<slug:slug>/quality/", quality_views.quality_dashboard, name="quality-dashboard"),
    path("projects/<slug:slug>/quality/qualification", quality_views.qualification_release_page,
         name="qualification-release"),
    path("", include("annotate.runs.model_reviewer_page_urls")),
    path("projects/<slug:slug>/exports/", exports_views.exports_page, name="exports-page"),
    path("projects/<slug:slug>/exports/<id:export_id>/retry", exports_views.export_retry_page, name="exports-retry"),
    path("projects/<slug:slug>/exports/<id:export_id>/cancel", exports_views.export_cancel_page,
         name="exports-cancel"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/lockouts/", login_throttle.lockouts_page, name="login-lockouts"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("", include("annotate.runs.urls")),
]
