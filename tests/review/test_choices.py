"""The one definition of choices: a click on the screen and the winner as stored."""

import pytest

from annotate.review.choices import CLICKS, CRITERION_CLICKS, WINNERS, swap_back, unswap


@pytest.mark.parametrize("a_on_left", [True, False])
def test_the_swap_back_gives_every_click_its_reviewer_made(a_on_left):
    for click in CLICKS:
        assert swap_back(unswap(click, a_on_left=a_on_left), a_on_left=a_on_left) == click
    assert {unswap(click, a_on_left=a_on_left) for click in CLICKS} == set(WINNERS)


def test_left_means_whichever_response_was_shown_on_the_left():
    assert unswap("left", a_on_left=True) == "a"
    assert unswap("left", a_on_left=False) == "b"
    assert unswap("right", a_on_left=False) == "a"
    # Ties and both_bad say nothing about a side, so the order does not change them.
    for click in ("tie", "both_bad"):
        assert unswap(click, a_on_left=True) == unswap(click, a_on_left=False) == click


def test_criteria_use_the_same_un_swap():
    assert {unswap(c, a_on_left=False) for c in CRITERION_CLICKS} == {"a", "b", "tie"}
