"""Anonymous visitors see the login page and nothing else."""

from django.contrib.auth.middleware import LoginRequiredMiddleware


class PagesNeedLoginMiddleware(LoginRequiredMiddleware):
    """Django's LoginRequiredMiddleware for pages; the API answers 401/403 itself.

    DRF authenticates tokens inside the view, after middleware has run, so API paths are left to
    DRF's own permission classes (which default to IsAuthenticated).
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
