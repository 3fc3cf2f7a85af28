"""The Django admin: an admin uploads an import file from the project's page."""

import io
import json

import pytest
from django.test import Client

from annotate.review.models import Prompt
from tests.conftest import make_items

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_browser(make_user):
    user = make_user("ada", "admin")
    user.is_superuser = True
    user.save()
    browser = Client()
    browser.force_login(user)
    return browser


def upload(browser, project, body: bytes):
    file = io.BytesIO(body)
    file.name = "items.jsonl"
    return browser.post(f"/admin/review/project/{project.pk}/import/", {"file": file}, follow=True)


def test_the_project_page_links_to_the_import_form(admin_browser, make_project):
    project = make_project()
    page = admin_browser.get(f"/admin/review/project/{project.pk}/change/")
    assert f"/admin/review/project/{project.pk}/import/".encode() in page.content


def test_a_good_file_is_imported_and_a_bad_one_lists_every_error(admin_browser, make_project):
    project = make_project()
    rows = [json.dumps(row) for row in make_items(3)]
    bad = upload(admin_browser, project, "\n".join([*rows, "{oops", '{"prompt_id": "x"}']).encode())
    assert b"line 4: not valid JSON" in bad.content and b"line 5: " in bad.content
    assert b"nothing was stored" in bad.content and not Prompt.objects.exists()
    good = upload(admin_browser, project, "\n".join(rows).encode())
    assert b"Imported 3 new prompt(s)" in good.content
    assert Prompt.objects.filter(project=project).count() == 3


def test_judgments_cannot_be_edited_or_deleted_in_the_admin(admin_browser):
    assert admin_browser.get("/admin/review/judgment/add/").status_code == 403
