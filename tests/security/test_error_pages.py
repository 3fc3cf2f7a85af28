"""A page a person may not open, or one that is not there, says why and offers a way back (not bare browser text);
the API keeps answering one JSON line."""

import pytest

pytestmark = pytest.mark.django_db


def test_a_forbidden_page_says_why_and_links_back(client, make_user):
    client.force_login(make_user("rita", "reviewer"))
    response = client.get("/runs/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "<h1>Not allowed</h1>" in page and "Only admins and engineers can" in page
    assert "You are logged in as rita" in page
    assert 'href="/">Back to your projects</a>' in page
    assert 'class="brand" href="/"' in page  # the site's own header, with its way home and log out


def test_a_missing_page_says_so_and_links_back(client, make_user):
    client.force_login(make_user("rita", "reviewer"))
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "<h1>Not found</h1>" in page and "<code>/no/such/page/</code>" in page
    assert 'href="/">Back to your projects</a>' in page


def test_the_api_still_answers_one_json_line(client, make_user):
    client.force_login(make_user("rita", "reviewer"))
    response = client.get("/api/v1/runs")
    assert response.status_code == 403 and response["Content-Type"].startswith("application/json")
    assert set(response.json()) == {"detail"}
    missing = client.get("/api/v1/no-such-thing")
    assert missing.status_code == 404 and set(missing.json()) == {"detail"}
