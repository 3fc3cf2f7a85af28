"""meta.strength of exported rows, worked out by hand, and the reward trainer's margins read from such an export.

A row decided by votes carries the mean strength of its counted votes for the chosen answer that gave one (3
decimals), null when none did; a row a ruling decides carries the ruling's strength.
"""

import io
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from annotate.review import adjudication
from annotate.review.assignments import assignment_next
from annotate.review.choices import swap_back
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.models import Assignment, Judgment, Pair
from tests.conftest import import_rows
from training.errors import PairwiseInputError
from training.reward import strength_margins
from training.snapshot import iter_rows

from .conftest import read_jsonl, side

pytestmark = pytest.mark.django_db

REVIEWERS = ("ann", "bob", "cat")
RATIONALE = "The chosen answer divides the distance by the time."
# (un-swapped choice, strength) of ann, bob and cat on the one pair of prompt p-000i.
VOTES = {
    0: (("a", 3), ("a", 2), ("a", 2)),  # unanimous: (3 + 2 + 2) / 3 = 2.333
    1: (("b", 1), ("b", 3), ("a", 3)),  # b wins: (1 + 3) / 2 = 2.0; the losing a vote's 3 is not counted
    2: (("a", 2), ("a", 2), ("tie", None)),  # bob's strength is then erased: a wins with 2 / 1 = 2.0
    3: (("a", 1), ("a", 2), ("b", 3)),  # ann first says a 3 and withdraws it: (1 + 2) / 2 = 1.5, not 2.0
    4: (("a", 2), ("b", 3), ("tie", None)),  # split: the ruling (b, 3) decides it: 3.0
    5: (("b", 2), ("b", 2), ("a", 1)),  # both b strengths erased: b wins with no strength: null
}
WITHDRAWN = ("ann", 3, ("a", 3))  # ann's first judgment of p-0003, retracted before she judges it again
NO_STRENGTH = {("bob", 2), ("ann", 5), ("bob", 5)}  # judgments stored without a strength
RULINGS = {4: ("b", 3), 1: ("a", 1)}  # p-0001's ruling counts only with --adjudications all


def items() -> list[dict]:
    """Prompts p-0000..p-0005, two answers each; p-0005 is tagged legacy, the others current."""
    return [{"prompt_id": f"p-{i:04d}", "prompt": f"Question {i}: how fast is {10 * i} km in 2 h?",
             "responses": [{"text": f"Answer {k} to question {i}: {5 * i + k} km/h", "model": f"model-{k}"}
                           for k in range(2)],
             "tags": ["legacy" if i == 5 else "current"]} for i in VOTES]


def submit(assignment, reviewer, choice: str, strength: int | None, now) -> None:
    button = side(assignment, choice)
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=button, strength=strength,
                    criteria={"correct": button if button in ("left", "right") else "tie", "complete": "tie"},
                    rationale=RATIONALE, client_key=uuid.uuid4(), now=now)


@pytest.fixture
def strength_project(make_project, make_user):
    """VOTES judged through the review services (each reviewer sees a on the left or the right at random), ann's
    withdrawn judgment, the judgments without a strength, and RULINGS by an adjudicator."""
    project = make_project(slug="strength", overlap=3, retest_rate=0)
    import_rows(project, items())
    clock = timezone.now()
    for position, name in enumerate(REVIEWERS):
        reviewer = make_user(name)
        while (assignment := assignment_next(project=project, reviewer=reviewer, now=clock)) is not None:
            clock += timedelta(seconds=20)
            index = int(assignment.pair.prompt.external_id.split("-")[1])
            if (name, index) == WITHDRAWN[:2]:
                submit(assignment, reviewer, *WITHDRAWN[2], clock)
                assignment = judgment_undo_last(project=project, reviewer=reviewer, now=clock)
                clock += timedelta(seconds=20)
            submit(assignment, reviewer, *VOTES[index][position], clock)
            if (name, index) in NO_STRENGTH:
                Judgment.objects.filter(pk=Assignment.objects.get(pk=assignment.pk).current_judgment_id).update(
                    strength=None)
    judy = make_user("judy", role="adjudicator")
    for index, (winner, strength) in RULINGS.items():
        pair = Pair.objects.get(project=project, prompt__external_id=f"p-{index:04d}")
        held = adjudication.adjudication_next(project=project, adjudicator=judy,
                                              queue=adjudication.QueueFilter(min_judgments=2), pair_id=pair.pk)
        adjudication.ruling_submit(assignment_id=held.pk, adjudicator=judy,
                                   choice=swap_back(winner, a_on_left=held.a_on_left), strength=strength,
                                   criteria=None, rationale="Read both twice; this one answers the question.",
                                   client_key=uuid.uuid4())
    return project


def export(project, out, *options: str) -> list[dict]:
    """`manage.py export_snapshot` with everything in train; returns the train rows."""
    call_command("export_snapshot", project.slug, "--out", str(out), "--test-ratio", "0", *options,
                 stdout=io.StringIO(), stderr=io.StringIO())
    return read_jsonl(out / "train.jsonl")


def by_prompt(rows: list[dict]) -> dict[str, tuple]:
    return {row["meta"]["prompt_id"]: (row["chosen"][-1]["content"][:8], row["meta"]["strength"],
                                       row["meta"]["decided_by"]) for row in rows}


def test_meta_strength_is_the_mean_strength_of_the_counted_votes_for_the_chosen_answer(strength_project, tmp_path):
    assert Judgment.objects.filter(retracted=True).count() == 1, "ann's withdrawal is on record"
    assert {a.a_on_left for a in Assignment.objects.filter(project=strength_project)} == {True, False}, (
        "votes were made with a on either side")

    rows = by_prompt(export(strength_project, tmp_path / "split", "--adjudications", "split"))

    assert rows == {
        "p-0000": ("Answer 0", 2.333, "unanimous"),
        "p-0001": ("Answer 1", 2.0, "strict_majority"),
        "p-0002": ("Answer 0", 2.0, "strict_majority"),
        "p-0003": ("Answer 0", 1.5, "strict_majority"),
        "p-0004": ("Answer 1", 3.0, "adjudication"),
        "p-0005": ("Answer 1", None, "strict_majority"),
    }
    ruled = by_prompt(export(strength_project, tmp_path / "all", "--adjudications", "all"))
    assert ruled["p-0001"] == ("Answer 0", 1.0, "adjudication"), "the ruling that decides a row gives its strength"
    ignored = by_prompt(export(strength_project, tmp_path / "ignore"))
    assert "p-0004" not in ignored and ignored["p-0001"] == ("Answer 1", 2.0, "strict_majority")


def test_the_reward_trainers_margins_read_an_exported_snapshot(strength_project, tmp_path):
    out = tmp_path / "current"
    rows = export(strength_project, out, "--adjudications", "split", "--tag", "current")
    strengths = [row["meta"]["strength"] for row in rows]
    assert sorted(strengths) == [1.5, 2.0, 2.0, 2.333, 3.0]

    margins = strength_margins((row["meta"] for row in iter_rows(out, "train")), snapshot=str(out), per_strength=0.5)
    assert margins == [strength * 0.5 for strength in strengths]

    everything = tmp_path / "everything"
    rows = export(strength_project, everything, "--adjudications", "split")
    without = 1 + [row["meta"]["prompt_id"] for row in rows].index("p-0005")
    with pytest.raises(PairwiseInputError) as error:
        strength_margins((row["meta"] for row in iter_rows(everything, "train")), snapshot=str(everything),
                         per_strength=0.5)
    assert f"train row {without} has no judgment strength (its meta.strength is null: no counted vote for its " \
           "chosen answer gave a strength)" in str(error.value)
