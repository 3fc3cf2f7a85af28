"""Rationale checks through the API: too short, reused across pairs, near-duplicate of another reviewer's,
pasted rather than typed; what the page reports is checked and nothing of the text it saw is kept."""

import pytest

from annotate.review.models import Judgment, RationaleCheck
from annotate.review.rationale import is_near_duplicate
from tests.conftest import import_rows, make_items

CAREFUL = "The left one converts the units first and then divides, which is the only correct order here."
TYPED = {"typing_seconds": 30.5, "typed_chars": 200, "pasted_chars": 0, "paste_events": 0}


def judge(client, project, valid_judgment, *, rationale: str, typing: dict | None = TYPED, choice: str = "left"):
    assignment = client.get(f"/api/v1/projects/{project.slug}/assignments/next").json()
    body = valid_judgment(choice, rationale=rationale)
    if typing is not None:
        body["typing"] = typing
    response = client.post(f"/api/v1/assignments/{assignment['id']}/judgment", body, format="json")
    assert response.status_code == 201, response.content
    return RationaleCheck.objects.get(judgment_id=response.json()["id"])


@pytest.fixture
def project(make_project):
    project = make_project(slug="checks", overlap=3, retest_rate=0, rationale_flag_chars=40)
    import_rows(project, make_items(6))
    return project


def test_a_rationale_under_the_flag_length_is_kept_and_flagged_too_short(project, make_user, client_for,
                                                                          valid_judgment):
    client = client_for(make_user("rita"))
    short = judge(client, project, valid_judgment, rationale="Left is right, it adds.")  # 23: over 15, under 40
    careful = judge(client, project, valid_judgment, rationale=CAREFUL)
    assert (short.too_short, short.flagged, short.chars) == (True, True, 23)
    assert (careful.too_short, careful.flagged) == (False, False)
    assert Judgment.objects.count() == 2, "a short rationale over the hard minimum is still a judgment"


def test_the_same_text_on_two_pairs_flags_both_but_not_a_second_look_at_one_pair(project, make_user, client_for,
                                                                                 valid_judgment):
    client = client_for(make_user("rita"))
    first = judge(client, project, valid_judgment, rationale=CAREFUL)
    assert not first.reused
    # Judged again after an undo: the same pair, so not a reuse.
    assert client.post(f"/api/v1/projects/{project.slug}/judgments/undo").status_code == 200
    again = judge(client, project, valid_judgment, rationale=CAREFUL)
    assert again.pair_id == first.pair_id and not again.reused
    # Another pair, the same words (case and punctuation aside): both judgments are flagged.
    other = judge(client, project, valid_judgment, rationale=CAREFUL.upper().replace(",", ";"))
    assert other.pair_id != first.pair_id and other.reused and other.flagged
    again.refresh_from_db()
    assert again.reused and again.flagged
    fresh = judge(client, project, valid_judgment, rationale=CAREFUL.replace("left", "right") + " Also shorter.")
    assert not fresh.reused
    # Another reviewer writing the same text is not this reviewer reusing it.
    theirs = judge(client_for(make_user("sam")), project, valid_judgment, rationale=CAREFUL)
    assert not theirs.reused


def test_a_near_copy_of_another_reviewers_rationale_on_the_pair_is_flagged(make_project, make_user, client_for,
                                                                           valid_judgment):
    project = make_project(slug="copies", overlap=3, retest_rate=0)
    import_rows(project, make_items(1))
    original = judge(client_for(make_user("ann")), project, valid_judgment, rationale=CAREFUL)
    copied = judge(client_for(make_user("bob")), project, valid_judgment,
                   rationale=CAREFUL.replace("the only correct order", "the only right order"))
    own_words = judge(client_for(make_user("cat")), project, valid_judgment,
                      rationale="Both add the distances, but only the left answer divides by the total time.")
    assert original.pair_id == copied.pair_id == own_words.pair_id
    assert (original.near_duplicate, copied.near_duplicate, own_words.near_duplicate) == (False, True, False)
    assert copied.flagged and not copied.reused


def test_near_duplicates_are_measured_on_the_words_not_on_short_stock_phrases():
    assert is_near_duplicate(CAREFUL, [CAREFUL.lower() + "!"])
    assert not is_near_duplicate("Left is correct.", ["Left is correct."]), "short phrases coincide by chance"
    assert not is_near_duplicate(CAREFUL, ["Neither answer converts the units, so both are wrong in the same way."])


def test_a_rationale_mostly_pasted_is_flagged_and_one_typed_is_not(project, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    pasted = judge(client, project, valid_judgment, rationale=CAREFUL,
                   typing={"typing_seconds": 1.2, "typed_chars": 10, "pasted_chars": len(CAREFUL) - 10,
                           "paste_events": 1})
    typed = judge(client, project, valid_judgment, rationale=CAREFUL.replace("left", "first"),
                  typing={"typing_seconds": 41.0, "typed_chars": len(CAREFUL) + 6, "pasted_chars": 0,
                          "paste_events": 0})
    unknown = judge(client, project, valid_judgment, rationale=CAREFUL.replace("left", "second"), typing=None)
    assert (pasted.pasted, pasted.paste_events, pasted.pasted_chars, pasted.typing_seconds) == (
        True, 1, len(CAREFUL) - 10, 1.2)
    assert (typed.pasted, typed.typed_chars) == (False, len(CAREFUL) + 6)
    # A client that does not say how the text was written is never called a paster.
    assert (unknown.pasted, unknown.typed_chars, unknown.paste_events) == (False, None, None)


@pytest.mark.parametrize("typing, words", [
    ("fast", "typing: must be an object"),
    ({"typing_seconds": "fast", "typed_chars": 1, "pasted_chars": 0, "paste_events": 0},
     "typing: typing_seconds 'fast' must be a number of seconds"),
    ({"typing_seconds": 3, "typed_chars": -1, "pasted_chars": 0, "paste_events": 0},
     "typing: typed_chars -1 must be a whole number"),
    ({"typing_seconds": 3, "typed_chars": 1, "pasted_chars": 0}, "typing: paste_events is missing"),
    # What was typed is never taken, even when a client offers it.
    ({"typing_seconds": 3, "typed_chars": 1, "pasted_chars": 0, "paste_events": 0, "keys": "secret"},
     "typing: unknown key(s) ['keys']"),
])
def test_bad_typing_signals_are_one_line_and_store_nothing(project, make_user, client_for, valid_judgment, typing,
                                                           words):
    client = client_for(make_user("rita"))
    assignment = client.get(f"/api/v1/projects/{project.slug}/assignments/next").json()
    response = client.post(f"/api/v1/assignments/{assignment['id']}/judgment",
                           {**valid_judgment("left", rationale=CAREFUL), "typing": typing}, format="json")
    assert response.status_code == 400 and words in response.json()["detail"]
    assert "\n" not in response.json()["detail"]
    assert not Judgment.objects.exists() and not RationaleCheck.objects.exists()


def test_the_flag_length_is_a_project_setting_and_zero_turns_it_off(make_project, make_user, client_for,
                                                                    valid_judgment):
    project = make_project(slug="lenient", retest_rate=0, rationale_flag_chars=0)
    import_rows(project, make_items(1))
    check = judge(client_for(make_user("rita")), project, valid_judgment, rationale="Left adds up right.")
    assert not check.too_short and not check.flagged
