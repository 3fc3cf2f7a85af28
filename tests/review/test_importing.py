"""The import file parser: every error as 'line N: reason', nothing half-accepted."""

import json

import pytest

from annotate.review.importing import ImportRejected, items_parse


def lines(*rows) -> list[str]:
    return [row if isinstance(row, str) else json.dumps(row) for row in rows]


GOOD = {"prompt_id": "speed-001", "prompt": "A car travels 60 km, then 90 km ...",
        "responses": [{"text": "50 km/h", "model": "sft", "model_version": "v3"},
                      {"text": "75 km/h", "model": "sft", "model_version": "v4"}],
        "tags": ["math"], "gold": {"preferred": 0}}


def test_a_good_line_becomes_an_item_with_chat_messages():
    [item] = items_parse(lines(GOOD))
    assert item.prompt_id == "speed-001"
    assert item.messages == [{"role": "user", "content": GOOD["prompt"]}]
    assert [r.model_version for r in item.responses] == ["v3", "v4"]
    assert item.gold_preferred == 0 and item.tags == ["math"]


def test_chat_message_prompts_are_kept_as_given():
    row = dict(GOOD, prompt=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    [item] = items_parse(lines(row))
    assert item.messages[0] == {"role": "system", "content": "Be brief."}


def test_every_error_in_the_file_is_reported_with_its_line():
    bad = lines(
        GOOD,
        "{not json",
        dict(GOOD, prompt_id="x", responses=[{"text": "only one", "model": "m"}]),
        dict(GOOD, prompt_id="y", gold={"preferred": 7}),
        dict(GOOD, prompt_id="z", prompt=[{"role": "robot", "content": "hi"}]),
        dict(GOOD, prompt_id="speed-001"),
        dict(GOOD, prompt_id="w", colour="blue"),
    )
    with pytest.raises(ImportRejected) as rejected:
        items_parse(bad)
    errors = rejected.value.errors
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 3", "line 4", "line 5", "line 6", "line 7"]
    assert "not valid JSON" in errors[0]
    assert "at least two" in errors[1]
    assert "gold.preferred=7" in errors[2]
    assert "role 'robot'" in errors[3]
    assert "already appears on line 1" in errors[4]
    assert "unknown key(s) ['colour']" in errors[5]


def test_an_empty_file_is_rejected():
    with pytest.raises(ImportRejected, match="no items"):
        items_parse(["", "  "])


def test_bytes_that_are_not_utf8_are_an_error_not_a_crash():
    with pytest.raises(ImportRejected) as rejected:
        items_parse([json.dumps(GOOD).encode(), b"\xff\xfe bad"])
    assert rejected.value.errors == ["line 2: not UTF-8 text (byte 1 of the line is 0xff); save the file as UTF-8"]
