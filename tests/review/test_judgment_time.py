"""The time a reviewer spent on a pair: a clock that went backwards between serving and judging (two web servers
whose clocks differ) records an unknown time, never a negative one, and the agreement report still builds."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from annotate.quality.selectors import judgment_table_for_project
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import Judgment
from tests.conftest import import_rows, make_items

pytestmark = pytest.mark.django_db


def test_a_judgment_taken_before_its_pair_was_served_has_an_unknown_time(make_project, make_user):
    project = make_project("speed", overlap=1)
    import_rows(project, make_items(2))
    ann = make_user("ann")
    served = timezone.now()
    first = assignment_next(project=project, reviewer=ann, now=served)
    judgment_submit(assignment_id=first.pk, reviewer=ann, choice="left", strength=2,
                    criteria={"correct": "left", "complete": "tie"}, rationale="Left adds up the legs right.",
                    client_key=uuid.uuid4(), now=served - timedelta(seconds=40))
    second = assignment_next(project=project, reviewer=ann, now=served)
    judgment_submit(assignment_id=second.pk, reviewer=ann, choice="right", strength=2,
                    criteria={"correct": "right", "complete": "tie"}, rationale="Right divides by the time.",
                    client_key=uuid.uuid4(), now=served + timedelta(seconds=30))
    assert list(Judgment.objects.order_by("id").values_list("seconds_spent", flat=True)) == [None, 30.0]
    table = judgment_table_for_project(project=project)
    assert sorted(str(value) for value in table.seconds) == ["30.0", "nan"]
