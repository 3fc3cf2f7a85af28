"""Helpers the security tests share."""

import json


def assert_one_json_line(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert b"\n" not in response.content and b"<html" not in response.content.lower()
    assert len(response["X-Request-ID"]) == 32
    return json.loads(response.content)
