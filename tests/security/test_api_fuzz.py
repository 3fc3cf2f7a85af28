"""Every operation in the OpenAPI schema, fed generated input by schemathesis: no server error, ever.

A bounded run (FUZZ_EXAMPLES examples an operation, a minute or two in all) so it runs in the normal
suite; set PAIRWISE_FUZZ_EXAMPLES higher for a longer hunt. It calls the app in-process (WSGI), as an
admin and as a reviewer, against a project with items, judgments and an export, with path slugs set to
that project's so the generated bodies reach the code behind the 404.
"""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token

from annotate.wsgi import application
from tests.conftest import import_rows, judge_until_done, make_items

FUZZ_EXAMPLES = int(os.environ.get("PAIRWISE_FUZZ_EXAMPLES", "15"))
SLUG = "fuzz"


# The schema is read once, at collection: producing it touches no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


@pytest.fixture
def fuzz_project(transactional_db, make_project, make_user):
    project = make_project(SLUG)
    import_rows(project, make_items(6, responses=3))
    for name in ("rita", "ravi"):
        judge_until_done(project, make_user(name), lambda assignment: "left")
    return project


@pytest.fixture
def tokens(fuzz_project, make_user) -> dict[str, str]:
    """An API token for each role that sends every generated request."""
    return {role: Token.objects.get_or_create(user=make_user(f"fuzz-{role}", role=role))[0].key
            for role in ("admin", "reviewer")}


@schema.parametrize()
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],  # no shrinking: the failing case is printed whole
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_is_a_server_error(case, tokens):
    if "slug" in (case.path_parameters or {}):
        case.path_parameters["slug"] = SLUG
    for role, token in tokens.items():
        response = case.call(headers={"Authorization": f"Token {token}"})
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} as {role} answered {response.status_code}: {response.text[:500]}\n"
            f"reproduce with: {case.as_curl_command()}"
        )
        if response.status_code >= 400:
            # Under /api/ every error is one JSON line naming what to fix.
            assert response.headers["content-type"][0].startswith("application/json"), response.text[:300]
            assert response.json().get("detail"), response.text[:300]
