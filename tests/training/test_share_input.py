"""The one rule for a share (training/share_input.py): both bounds included, nothing that is not a number."""

import pytest

from training.share_input import NotAShare, read_share


@pytest.mark.parametrize(("value", "number"), [(0, 0.0), (1, 1.0), ("0.25", 0.25), (0.9, 0.9)])
def test_a_number_within_the_bounds_both_included_is_a_share(value, number):
    assert read_share(value) == number


@pytest.mark.parametrize(("value", "read_as"), [
    (True, None), ("half", None), ([0.5], None), (None, None),
    (1.5, 1.5), (-0.0001, -0.0001), (float("inf"), float("inf")), ("1e309", float("inf")),
])
def test_anything_else_is_refused_with_what_it_read_as(value, read_as):
    with pytest.raises(NotAShare) as refused:
        read_share(value)
    assert refused.value.number == read_as


def test_nan_and_a_narrower_span_are_refused():
    with pytest.raises(NotAShare):
        read_share(float("nan"))
    assert read_share("0.9", high=0.9) == 0.9
    with pytest.raises(NotAShare):
        read_share(0.91, high=0.9)
