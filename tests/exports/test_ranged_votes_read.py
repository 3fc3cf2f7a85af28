"""The export's votes read range by range (annotate/exports/selectors.py, _ranged_votes_batches): the bounds, the
same pairs in the same order as the one-statement read, and a reader thread that stops with its writer."""

import threading
import time

import pytest
from django.db import connection, transaction

from annotate.exports import pipeline, selectors
from annotate.exports.filters import ExportError, filters_parse
from annotate.exports.pipeline import snapshot_write
from annotate.exports.selectors import key_range_bounds, pair_votes_stream
from training.snapshot import SnapshotWriter

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the COPY read is PostgreSQL's")


def readers_alive() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "export-votes-reader" and thread.is_alive()]


def export_backends() -> int:
    """Connections of the database that the export's votes read opened (by their application_name)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND application_name = %s", [selectors.EXPORT_APPLICATION_NAME])
        return cursor.fetchone()[0]


def export_backends_gone() -> bool:
    """A closed connection's server process ends a moment after the client lets go: wait up to 10 s for it."""
    deadline = time.monotonic() + 10
    while export_backends() and time.monotonic() < deadline:
        time.sleep(0.05)
    return export_backends() == 0


def test_bounds_cut_the_keys_into_rising_ranges_of_about_range_pairs():
    assert key_range_bounds(0) == [] and key_range_bounds(selectors.RANGE_PAIRS) == []
    bounds = key_range_bounds(333_334)  # the bench's pairs: 9 ranges
    assert len(bounds) == 8 and bounds == sorted(bounds) and len(set(bounds)) == 8
    assert all(len(bound) == 4 and int(bound, 16) for bound in bounds)
    widths = [b - a for a, b in zip([0, *(int(x, 16) for x in bounds)], [*(int(x, 16) for x in bounds), 0x10000],
                                    strict=True)]
    assert max(widths) - min(widths) <= 1  # evenly spaced


def test_long_answers_make_smaller_ranges():
    assert selectors.pairs_per_range(600) == selectors.RANGE_PAIRS  # the bench's short answers
    assert selectors.pairs_per_range(8192) == selectors.RANGE_TEXT_BYTES // 8192 == 4096
    assert selectors.pairs_per_range(0) == selectors.RANGE_PAIRS and selectors.pairs_per_range(10**12) == 1
    assert len(key_range_bounds(333_334, selectors.pairs_per_range(8192))) == 81  # 82 ranges of about 4,065 pairs


@pytest.mark.django_db(transaction=True)
def test_ranges_give_the_pairs_of_the_one_statement_read_in_its_order(voted_project, monkeypatch):
    filters = filters_parse({})
    with transaction.atomic():  # inside a transaction: the server-side cursor over the one statement
        one_statement = list(pair_votes_stream(project=voted_project, filters=filters))
    monkeypatch.setattr(selectors, "RANGE_PAIRS", 2)
    totals: list[int] = []
    ranged = list(pair_votes_stream(project=voted_project, filters=filters, on_total=totals.append))
    assert len(key_range_bounds(len(ranged))) == 5  # 12 pairs in six ranges
    assert totals == [12]
    assert ranged == one_statement
    assert [pair.prompt_key for pair in ranged] == sorted(pair.prompt_key for pair in ranged)


@pytest.mark.django_db(transaction=True)
def test_a_writer_that_stops_early_stops_the_reader_and_closes_its_connection(voted_project, monkeypatch):
    monkeypatch.setattr(selectors, "RANGE_PAIRS", 2)
    assert export_backends_gone()  # an earlier test's export connection may still be ending
    stream = pair_votes_stream(project=voted_project, filters=filters_parse({}))
    first = next(stream)
    assert first.text_a and readers_alive() and export_backends() == 1
    stream.close()  # what the export does to the stream when the writer fails
    assert readers_alive() == []
    assert export_backends_gone()


@pytest.mark.django_db(transaction=True)
def test_an_export_whose_writer_fails_stops_the_reader_while_its_error_is_still_held(voted_project, monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setattr(selectors, "RANGE_PAIRS", 2)
    monkeypatch.setattr(pipeline, "CONSENSUS_BATCH", 1)  # rows are written as their pairs come, not 4,096 at a time
    assert export_backends_gone()
    readers_when_failing = []

    def add_pair_failing_on_the_second(self, *args, **kwargs):
        readers_when_failing.append(readers_alive())
        if len(readers_when_failing) == 2:
            raise ValueError("the writer failed")

    monkeypatch.setattr(SnapshotWriter, "add_pair", add_pair_failing_on_the_second)
    with pytest.raises(ExportError, match="the writer failed") as failure:
        snapshot_write(project=voted_project, filters=filters_parse({}), out_dir=tmp_path / "snapshot",
                       created_at="2026-01-02T03:04:05Z")
    assert readers_when_failing[-1], "the reader was still at work when the writer failed"
    # The traceback (and with it the pipeline's frames) is still alive here: the stream was closed, not collected.
    assert failure.traceback and readers_alive() == []
    assert export_backends_gone()
    assert not (tmp_path / "snapshot").exists()


@pytest.mark.django_db(transaction=True)
def test_an_error_in_the_reader_reaches_the_writer(voted_project, monkeypatch):
    monkeypatch.setattr(selectors, "RANGE_PAIRS", 2)
    # The prompt's external id ("p-0000") read as a number: the reader's COPY fails on the first row.
    monkeypatch.setattr(selectors, "VOTES_COLUMN_TYPES", ("int8", "int8", "int8", *selectors.VOTES_COLUMN_TYPES[3:]))
    with pytest.raises(ValueError, match="p-00"):
        list(pair_votes_stream(project=voted_project, filters=filters_parse({})))
    assert readers_alive() == []
    assert export_backends_gone()


@pytest.fixture
def danish_prompt_keys():
    """review_prompt.content_key in a Danish collation, where "aa" sorts as "å", after "z" (and after "ff")."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_collation WHERE collname = 'da-x-icu'")
        if cursor.fetchone() is None:
            pytest.skip("this PostgreSQL has no ICU collation da-x-icu")
        cursor.execute('ALTER TABLE review_prompt ALTER COLUMN content_key TYPE varchar(64) COLLATE "da-x-icu"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute('ALTER TABLE review_prompt ALTER COLUMN content_key TYPE varchar(64) COLLATE "default"')


@pytest.mark.django_db(transaction=True)
def test_ranges_follow_the_databases_collation_not_code_points(voted_project, danish_prompt_keys, monkeypatch):
    # Every two-digit hex prefix a bound, in code-point order: in Danish, "aa".."af" come after "ff", so ranges cut
    # in this order would overlap and repeat pairs; the database sorts the bounds first.
    monkeypatch.setattr(selectors, "key_range_bounds", lambda pairs, per_range: [f"{i:02x}" for i in range(1, 256)])
    filters = filters_parse({})
    with transaction.atomic():
        one_statement = list(pair_votes_stream(project=voted_project, filters=filters))
    ranged = list(pair_votes_stream(project=voted_project, filters=filters))
    assert len(ranged) == 12 and len({pair.pair_id for pair in ranged}) == 12
    assert ranged == one_statement


@pytest.mark.django_db(transaction=True)
def test_ranges_shrink_with_the_texts_length_and_give_the_same_pairs(voted_project, monkeypatch):
    filters = filters_parse({})
    with transaction.atomic():
        one_statement = list(pair_votes_stream(project=voted_project, filters=filters))
    # The fixture's prompt and answers run to about 110 bytes a pair: 250 bytes a range is two pairs.
    monkeypatch.setattr(selectors, "RANGE_TEXT_BYTES", 250)
    cuts = []
    monkeypatch.setattr(selectors, "key_range_bounds",
                        lambda pairs, per_range, cut=selectors.key_range_bounds: cuts.append(per_range) or cut(pairs, per_range))
    assert list(pair_votes_stream(project=voted_project, filters=filters)) == one_statement
    assert cuts == [2]
