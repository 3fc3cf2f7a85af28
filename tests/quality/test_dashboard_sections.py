"""The quality dashboard's qualification results and rationale flags, per reviewer and per judgment."""

import uuid

import pytest

from annotate.review.assignments import assignment_next
from annotate.review.errors import ReviewError
from annotate.review.judgments import judgment_submit
from annotate.review.models import QualificationAttempt
from annotate.review.rationale import TypingSignals
from tests.conftest import answer_gold, import_rows, make_items
from tests.quality.helpers import read_page

pytestmark = pytest.mark.django_db

PASTED = TypingSignals(typing_seconds=0.4, typed_chars=0, pasted_chars=80, paste_events=1)


def judge_all(project, reviewer, *, rationale, typing=None, right_on_gold: bool = True) -> None:
    """The reviewer judges everything they are given; gold items right or wrong as asked."""
    while True:
        try:
            assignment = assignment_next(project=project, reviewer=reviewer)
        except ReviewError:
            return  # held for an admin
        if assignment is None:
            return
        pair = assignment.pair
        gold = pair.prompt.gold_response_id
        if gold is not None:
            a_wins = (gold == pair.response_a_id) == right_on_gold
            choice = "left" if a_wins == assignment.a_on_left else "right"
        else:
            choice = "left"
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
            criteria={"correct": choice, "complete": "tie"}, rationale=rationale(assignment), client_key=uuid.uuid4(),
            typing=typing,
        )


@pytest.fixture
def onboarded(make_project, make_user):
    project = make_project(slug="onboarded", overlap=3, retest_rate=0, qualification_items=2,
                           qualification_attempts=1, rationale_flag_chars=30)
    rows = make_items(6)
    for row in rows[:4]:
        row["gold"] = {"preferred": 0, "reason": "It adds correctly."}
    import_rows(project, rows)
    judge_all(project, make_user("ann"), rationale=lambda a: f"Checked the sum of question {a.pair.prompt.external_id} twice.")
    judge_all(project, make_user("bob"), rationale=lambda a: "Same words each time, sadly.", right_on_gold=False)
    judge_all(project, make_user("cat"), rationale=lambda a: f"Pasted reasoning about {a.pair.prompt.external_id} from elsewhere.",
              typing=PASTED)
    return project


def dashboard(client, make_user, role: str = "admin"):
    client.force_login(make_user(f"someone-{role}", role))
    response = client.get("/projects/onboarded/quality/")
    assert response.status_code == 200
    return response


def rows_of(page, table: str) -> dict[str, dict]:
    return {row["cells"][0]: row for row in page.tables[table][1:]}


def test_the_dashboard_shows_each_reviewers_qualification(onboarded, client, make_user):
    page = read_page(dashboard(client, make_user))
    rows = rows_of(page, "qualification-table")
    assert rows["ann"]["badges"] == ["passed"] and rows["ann"]["cells"][2] == "1: 2 of 2 right, passed"
    assert rows["cat"]["badges"] == ["passed"]
    assert rows["bob"]["badges"] == ["held"] and rows["bob"]["cells"][2] == "1: 0 of 2 right, failed"
    html = dashboard(client, make_user).content.decode()
    assert 'name="action" value="retry"' in html and "1 waiting now" in html
    # 2 items, the default pass mark of 80% (both right), one attempt: a coin passes a quarter of the time.
    assert 'Someone who picks sides at random passes <span id="guess-pass-chance">25.0%</span>' in html


def test_an_admin_releases_a_held_reviewer_from_the_dashboard_and_an_engineer_cannot(onboarded, client, make_user):
    client.force_login(make_user("eve", "engineer"))
    engineer_page = client.get("/projects/onboarded/quality/").content.decode()
    assert 'value="retry"' not in engineer_page, "only admins get the buttons"
    refused = client.post("/projects/onboarded/quality/qualification", {"username": "bob", "action": "pass"})
    assert refused.status_code == 403
    client.force_login(make_user("ada", "admin"))
    done = client.post("/projects/onboarded/quality/qualification", {"username": "bob", "action": "retry"}, follow=True)
    assert "bob may start attempt 2" in done.content.decode()
    latest = QualificationAttempt.objects.filter(reviewer__username="bob").order_by("-number").first()
    assert (latest.number, latest.status) == (2, "running")


def test_the_dashboard_shows_rationale_flags_per_reviewer_and_per_judgment(onboarded, client, make_user):
    page = read_page(dashboard(client, make_user))
    per_reviewer = rows_of(page, "rationale-reviewers")
    assert "ann" not in per_reviewer, "careful, typed, different rationales raise no flag"
    # bob wrote one short text on both gold items he got before he was held: too short and reused.
    bob = per_reviewer["bob"]["cells"]
    assert (bob[1], bob[3], bob[4], bob[6]) == ("2", "2", "2", "0")
    cat = per_reviewer["cat"]["cells"]
    assert (cat[1], cat[6]) == ("6", "6")  # every one of cat's rationales was pasted
    latest = page.tables["rationale-judgments"][1:]
    assert len(latest) == 8  # all of them: fewer than the 25 shown
    assert {tuple(row["badges"]) for row in latest if row["cells"][1] == "bob"} == {("too short", "reused")}
    cat_row = next(row for row in latest if row["cells"][1] == "cat")
    assert cat_row["badges"] == ["pasted"] and "0 typed, 80 pasted (1 paste), 0.4 s" in cat_row["cells"][4]
    assert "flagged" in " ".join(page.charts["rationale-flags"])


def qualification_rows(html: str) -> dict[str, tuple[str, list[str]]]:
    """Each row of the qualification table: reviewer -> (status badge, the admin's button values)."""
    import re

    table = html[html.index('id="qualification-table"'):]
    table = table[:table.index("</table>")]
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)[1:]:
        name = re.search(r'<th scope="row" class="name">(.*?)</th>', row).group(1)
        status = re.search(r'class="badge status-[a-z_]+">(.*?)</span>', row).group(1)
        rows[name] = (status, re.findall(r'name="action" value="([a-z]+)"', row))
    return rows


def test_every_state_but_passed_has_the_admins_buttons_and_short_gold_is_shown(make_project, make_user, client):
    # Configured before its import, as the demo was: 3 gold pairs for 2 items x 2 attempts.
    project = make_project(slug="short", overlap=3, retest_rate=0, qualification_items=2, qualification_pass_mark=1.0,
                           qualification_attempts=2)
    rows = make_items(5)
    for row in rows[:3]:
        row["gold"] = {"preferred": 0, "reason": "It adds correctly."}
    import_rows(project, rows)
    ann, bob, cat, eve = (make_user(name) for name in ("ann", "bob", "cat", "eve"))
    make_user("dan")  # never asked for work
    for _ in range(2):
        answer_gold(project, ann, right=True)
        answer_gold(project, eve, right=False)  # failed, one attempt left
    for _ in range(3):
        answer_gold(project, bob, right=False)  # attempt 2 runs out of gold after one item
    with pytest.raises(ReviewError):
        assignment_next(project=project, reviewer=bob)
    answer_gold(project, cat, right=True)  # running, one item to go

    client.force_login(make_user("ada", "admin"))
    html = client.get("/projects/short/quality/").content.decode()
    assert qualification_rows(html) == {
        "ann": ("passed", []), "bob": ("held", ["retry", "pass"]), "cat": ("running", ["retry", "pass"]),
        "dan": ("not_started", ["pass"]), "eve": ("failed", ["retry", "pass"]),
    }
    assert ("Not enough gold: qualification items 2 x attempts 2 need 4 gold pairs but project &#x27;short&#x27; "
            "has 3") in html
    done = client.post("/projects/short/quality/qualification", {"username": "bob", "action": "pass"}, follow=True)
    assert "bob passed." in done.content.decode()
    assert qualification_rows(done.content.decode())["bob"] == ("passed", [])


def test_a_project_whose_gold_fills_its_round_shows_no_warning(onboarded, client, make_user):
    assert "Not enough gold" not in dashboard(client, make_user).content.decode()


def test_gold_judged_as_ordinary_pairs_counts_in_gold_accuracy_and_the_section_says_so(make_project, make_user,
                                                                                      client):
    # As in the judged demo: gold items, but no qualification round and no gold rate, so no gold check is served.
    project = make_project(slug="plain-gold", overlap=3, retest_rate=0)
    rows = make_items(6)
    for row in rows[:3]:
        row["gold"] = {"preferred": 0, "reason": "It adds correctly."}
    import_rows(project, rows)
    judge_all(project, make_user("ann"), rationale=lambda a: f"Checked the sum of question {a.pair.prompt.external_id}.")
    client.force_login(make_user("ada", "admin"))
    response = client.get("/projects/plain-gold/quality/")
    html = response.content.decode()
    page = read_page(response)
    assert page.figures["Gold accuracy"] == "100%" and "3 gold judgments" in html
    section = html[html.index('id="qualification"'):html.index('id="rationale-flags"')]
    assert "No reviewer has answered a qualification round or an unannounced gold check yet." in section
    assert ("Gold accuracy above counts all 3 gold judgments: every judgment of a gold item outside a qualification "
            "round, whether or not it was served as a gold check.") in section
    assert "No reviewer has answered a gold check yet" not in html


def test_a_project_without_gold_judgments_says_nothing_about_their_scope(make_project, make_user, client):
    make_project(slug="no-gold", overlap=3, retest_rate=0)
    client.force_login(make_user("ada", "admin"))
    html = client.get("/projects/no-gold/quality/").content.decode()
    assert "No reviewer has answered a qualification round or an unannounced gold check yet." in html
    assert 'id="qualification-gold-scope"' not in html
