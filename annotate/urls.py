from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from annotate.quality import api as quality_api
from annotate.quality import views as quality_views
from annotate.review import api as review_api
from annotate.review import views as review_views

api_v1 = [
    path("projects/<slug:slug>/assignments/next", review_api.AssignmentNextView.as_view(), name="assignment-next"),
    path("projects/<slug:slug>/judgments/undo", review_api.JudgmentUndoView.as_view(), name="judgment-undo"),
    path("projects/<slug:slug>/items", review_api.ItemsImportView.as_view(), name="items-import"),
    path("projects/<slug:slug>/agreement", quality_api.AgreementReportView.as_view(), name="agreement-report"),
    path("assignments/<int:assignment_id>/judgment", review_api.JudgmentSubmitView.as_view(), name="judgment-submit"),
]

urlpatterns = [
    path("", review_views.home, name="home"),
    path("review/<slug:slug>/", review_views.review_page, name="review"),
    path("projects/<slug:slug>/quality/", quality_views.quality_dashboard, name="quality-dashboard"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/", include(api_v1)),
]
