"""The JudgmentTable contract between the selector and the statistics."""

import numpy as np
import pytest

from annotate.quality.table import JudgmentTable


def _records():
    return [
        {
            "pair": 7,
            "reviewer": "ann",
            "winner": "a",
            "strength": 3,
            "left_is_a": True,
            "model_a": "m@1",
            "model_b": "m@2",
        },
        {
            "pair": 7,
            "reviewer": "bob",
            "winner": "b",
            "strength": 2,
            "left_is_a": True,
            "criteria": {"correct": "b"},
        },
        {"pair": 9, "reviewer": "ann", "winner": "tie", "left_is_a": False, "gold": "a", "seconds": 12.5},
        {"pair": 9, "reviewer": "ann", "winner": "a", "left_is_a": False, "is_retest": True},
    ]


def test_from_records_codes_names_and_defaults():
    table = JudgmentTable.from_records(_records())
    assert len(table) == 4
    assert table.reviewer_names == ["ann", "bob"]
    assert table.reviewer.tolist() == [0, 1, 0, 0]
    assert table.winner.tolist() == [0, 1, 2, 0]
    assert table.strength.tolist() == [3, 2, 0, 1]
    assert table.gold.tolist() == [-1, -1, 0, -1]
    assert table.model_names[:2] == ["m@1", "m@2"]
    # A criterion first seen on row 1 is missing on row 0; rows without it are missing too.
    assert table.criteria["correct"].tolist() == [-1, 1, -1, -1]
    assert np.isnan(table.seconds[0]) and table.seconds[2] == pytest.approx(12.5)


def test_columns_have_the_contract_dtypes_and_are_read_only():
    table = JudgmentTable.from_records(_records())
    assert table.pair.dtype == np.int64 and table.reviewer.dtype == np.int32
    assert table.winner.dtype == np.int8 and table.left_is_a.dtype == np.bool_
    assert table.seconds.dtype == np.float32 and table.created_at.dtype == np.float64
    with pytest.raises(ValueError):
        table.winner[0] = 1


def test_clicked_left_and_signed_strength():
    table = JudgmentTable.from_records(_records())
    # a on the left chosen: left; b chosen with a on the left: right; tie: no side; a chosen, a on the right: right
    assert table.clicked_left.tolist() == [True, False, False, False]
    assert table.signed_strength.tolist() == [3, -2, 0, 1]


def test_pair_index_is_dense_and_maps_back_to_ids():
    table = JudgmentTable.from_records(_records())
    assert table.pair_ids.tolist() == [7, 9]
    assert table.pair_ids[table.pair_index].tolist() == table.pair.tolist()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"winner": np.array([0, 4])}, "winner"),
        ({"strength": np.array([0, 1])}, "strength"),  # a win needs strength 1..3
        ({"strength": np.array([1, 2]), "winner": np.array([0, 2])}, "strength"),  # a tie has strength 0
        ({"reviewer": np.array([0, 5])}, "reviewer"),
        ({"model_b": np.array([0, 3])}, "model_b"),
        ({"gold": np.array([0, 2])}, "gold"),
        ({"seconds": np.array([1.0, -1.0])}, "seconds"),
        ({"created_at": np.array([0.0, np.inf])}, "created_at"),
        ({"left_is_a": np.array([True])}, "left_is_a"),
        ({"criteria": {"correct": np.array([0, 3])}}, "correct"),
    ],
)
def test_constructor_rejects_broken_rows_with_the_column_named(change, message):
    columns = {
        "pair": np.array([1, 1]),
        "reviewer": np.array([0, 1]),
        "winner": np.array([0, 1]),
        "strength": np.array([1, 2]),
        "left_is_a": np.array([True, False]),
        "is_retest": np.array([False, False]),
        "seconds": np.array([3.0, 4.0]),
        "created_at": np.array([0.0, 1.0]),
        "gold": np.array([-1, -1]),
        "model_a": np.array([0, 0]),
        "model_b": np.array([1, 1]),
        "reviewer_names": ["ann", "bob"],
        "model_names": ["m@1", "m@2"],
    }
    JudgmentTable(**columns)  # the unchanged columns are valid
    with pytest.raises(ValueError, match=message):
        JudgmentTable(**{**columns, **change})


def test_bad_record_values_are_rejected():
    with pytest.raises(ValueError, match="winner"):
        JudgmentTable.from_records([{"pair": 1, "reviewer": "ann", "winner": "left"}])


def test_empty_table():
    table = JudgmentTable.empty(criteria_keys=["correct"])
    assert len(table) == 0 and table.pair_ids.size == 0
    assert table.criteria["correct"].shape == (0,)
