"""Writing aside and renaming (training/atomic_write.py): a target is the old content or the new, never half of
either, and a writer that fails leaves nothing of its own behind."""

import os
import stat

import pytest

from training.atomic_write import (
    atomic_file,
    atomic_folder,
    atomic_path,
    discard_partial,
    move_into_place,
    write_bytes_atomic,
    write_text_atomic,
)


class WriterFailed(Exception):
    pass


def test_text_and_bytes_replace_the_whole_file(tmp_path):
    target = tmp_path / "run.json"
    write_text_atomic(target, "old\n")
    write_text_atomic(target, "new é\n")
    assert target.read_text(encoding="utf-8") == "new é\n"

    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_a_reader_sees_the_old_file_until_the_new_one_is_complete(tmp_path):
    target = tmp_path / "tasks.jsonl"
    target.write_text("old\n")
    with atomic_file(target) as out:
        out.write("first half, ")
        out.flush()
        assert target.read_text() == "old\n"
        out.write("second half\n")
    assert target.read_text() == "first half, second half\n"


def test_a_failing_writer_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "tasks.jsonl"
    target.write_text("old\n")
    with pytest.raises(WriterFailed), atomic_file(target, "wb") as out:
        out.write(b"half a line")
        raise WriterFailed
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]


def test_a_failing_first_write_leaves_nothing(tmp_path):
    with pytest.raises(WriterFailed), atomic_file(tmp_path / "new.jsonl") as out:
        out.write("half")
        raise WriterFailed
    assert list(tmp_path.iterdir()) == []


def test_a_path_for_writers_that_open_it_themselves(tmp_path):
    target = tmp_path / "batch-000001-rank0.parquet"
    with atomic_path(target) as partial:
        assert partial.parent == tmp_path and partial.name.startswith(".")  # hidden beside the target
        assert not target.exists()
        partial.write_bytes(b"rows")
    assert target.read_bytes() == b"rows"

    with pytest.raises(WriterFailed), atomic_path(target) as partial:
        partial.write_bytes(b"other rows, half written")
        raise WriterFailed
    assert target.read_bytes() == b"rows"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_private_files_are_readable_by_their_owner_only(tmp_path):
    with atomic_file(tmp_path / "private.jsonl", private=True) as out:
        out.write("{}\n")
    assert stat.S_IMODE((tmp_path / "private.jsonl").stat().st_mode) == 0o600

    umask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "shared.json", "{}\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644


def test_a_folder_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "checkpoint"
    with atomic_folder(target) as partial:
        (partial / "weights.bin").write_bytes(b"w")
        (partial / "nested").mkdir()
        (partial / "nested" / "config.json").write_text("{}")
        assert not target.exists()
    assert (target / "weights.bin").read_bytes() == b"w" and (target / "nested" / "config.json").is_file()

    other = tmp_path / "other"
    with pytest.raises(WriterFailed), atomic_folder(other) as partial:
        (partial / "weights.bin").write_bytes(b"half")
        raise WriterFailed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_folder_never_replaces_one_that_holds_files(tmp_path):
    target = tmp_path / "snap"
    target.mkdir()
    (target / "manifest.json").write_text("kept")
    with pytest.raises(OSError), atomic_folder(target) as partial:
        (partial / "manifest.json").write_text("new")
    assert (target / "manifest.json").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]


def test_a_finished_scratch_file_moves_into_place(tmp_path):
    scratch, target = tmp_path / ".incoming-1.jsonl", tmp_path / "sets" / "abc.jsonl"
    scratch.write_text("task\n")
    target.parent.mkdir()
    move_into_place(scratch, target)
    assert target.read_text() == "task\n" and not scratch.exists()


def test_what_a_killed_writer_left_is_discarded_and_nothing_else(tmp_path):
    target = tmp_path / "snap"
    (tmp_path / ".snap.partial-0123456789ab").mkdir()
    (tmp_path / ".snap.partial-0123456789ab" / "train.jsonl").write_text("half")
    (tmp_path / ".snap.partial-ba9876543210").write_text("half")
    (tmp_path / ".snapshot.partial-0123456789ab").write_text("another target's")
    (tmp_path / "snap.jsonl").write_text("kept")

    assert discard_partial(target) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".snapshot.partial-0123456789ab", "snap.jsonl"]
    assert discard_partial(tmp_path / "missing" / "snap") == 0
