"""The snapshot format: written atomically with deterministic bytes, read back only when every hash holds."""

import json

import pytest

from training import snapshot
from training.snapshot import SnapshotError, SnapshotWriter

CREATED_AT = "2025-01-01T00:00:00Z"


def write_rows(out, *, row_format="conversational", file_format="jsonl", n_train=3, n_test=2):
    with SnapshotWriter(out, project="speed", created_at=CREATED_AT, criteria_version=2,
                        filters={"min_judgments": 2, "exclude_ties": True},
                        agreement={"percent_agreement": 0.75}, counts={"judgments": 9},
                        row_format=row_format, file_format=file_format) as writer:
        for i in range(n_train + n_test):
            writer.add_pair("train" if i < n_train else "test", prompt=f"What is {i} + 1?", chosen=f"{i + 1}",
                            rejected=f"{i + 2}", meta={"pair_id": i, "judgments": [1, 2] if i % 2 else None})
    return writer.manifest


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
@pytest.mark.parametrize("row_format", ["conversational", "standard"])
def test_written_snapshot_loads_back_as_trl_preference_rows(tmp_path, row_format, file_format):
    manifest = write_rows(tmp_path / "snap", row_format=row_format, file_format=file_format)

    data = snapshot.load(tmp_path / "snap")

    assert manifest["format"] == "pairwise.snapshot/1"
    assert set(manifest["files"]) == {f"train.{file_format}", f"test.{file_format}"}
    assert (len(data["train"]), len(data["test"])) == (3, 2)
    row = data["train"][1]
    assert list(row) == ["prompt", "chosen", "rejected", "meta"]
    assert row["meta"] == {"pair_id": 1, "judgments": [1, 2]}
    if row_format == "conversational":
        assert row["prompt"] == [{"role": "user", "content": "What is 1 + 1?"}]
        assert row["chosen"] == [{"role": "assistant", "content": "2"}]
    else:
        assert (row["prompt"], row["chosen"], row["rejected"]) == ("What is 1 + 1?", "2", "3")


def test_manifest_records_provenance_and_counts(tmp_path):
    manifest = write_rows(tmp_path / "snap")
    on_disk = json.loads((tmp_path / "snap" / "manifest.json").read_text())

    assert on_disk == manifest
    assert on_disk["project"] == "speed" and on_disk["criteria_version"] == 2
    assert on_disk["created_at"] == CREATED_AT
    assert on_disk["filters"] == {"min_judgments": 2, "exclude_ties": True}
    assert on_disk["agreement"] == {"percent_agreement": 0.75}
    assert on_disk["counts"]["train"] == 3 and on_disk["counts"]["test"] == 2
    assert on_disk["counts"]["judgments"] == 9
    assert on_disk["snapshot_id"].startswith("snap-")


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
def test_same_inputs_give_byte_identical_snapshots(tmp_path, file_format):
    write_rows(tmp_path / "a", file_format=file_format)
    write_rows(tmp_path / "b", file_format=file_format)

    for name in ("manifest.json", f"train.{file_format}", f"test.{file_format}"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_failed_export_leaves_nothing_behind(tmp_path):
    with pytest.raises(RuntimeError), SnapshotWriter(tmp_path / "snap", project="p", created_at=CREATED_AT,
                                                     criteria_version=1, filters={}) as writer:
        writer.add_pair("train", prompt="q", chosen="a", rejected="b")
        raise RuntimeError("database went away")

    assert list(tmp_path.iterdir()) == []


def test_existing_snapshot_is_never_overwritten(tmp_path):
    write_rows(tmp_path / "snap")
    before = (tmp_path / "snap" / "train.jsonl").read_bytes()

    with pytest.raises(FileExistsError):
        write_rows(tmp_path / "snap")
    assert (tmp_path / "snap" / "train.jsonl").read_bytes() == before


def test_a_prompt_cannot_be_in_both_splits(tmp_path):
    with pytest.raises(ValueError, match="already in the train split"), SnapshotWriter(
            tmp_path / "snap", project="p", created_at=CREATED_AT, criteria_version=1, filters={}) as writer:
        writer.add_pair("train", prompt="same question", chosen="a", rejected="b")
        writer.add_pair("test", prompt="same question", chosen="c", rejected="d")
    assert not (tmp_path / "snap").exists()


def test_malformed_row_is_refused_by_the_writer(tmp_path):
    with pytest.raises(ValueError, match="role"), SnapshotWriter(
            tmp_path / "snap", project="p", created_at=CREATED_AT, criteria_version=1, filters={}) as writer:
        writer.add_row("train", {"prompt": [{"role": "robot", "content": "hi"}],
                                 "chosen": [{"role": "assistant", "content": "a"}],
                                 "rejected": [{"role": "assistant", "content": "b"}], "meta": {}})


@pytest.mark.parametrize(("pair", "message"), [
    ({"prompt": [{"role": "robot", "content": "hi"}], "chosen": "a", "rejected": "b"}, "role"),
    ({"prompt": [{"role": "user", "content": 7}], "chosen": "a", "rejected": "b"}, "content a string"),
    ({"prompt": [], "chosen": "a", "rejected": "b"}, "non-empty list"),
    ({"prompt": "q", "chosen": None, "rejected": "b"}, "response texts"),
    ({"prompt": "q", "chosen": "a", "rejected": ["b"]}, "response texts"),
])
def test_a_malformed_pair_is_refused_and_no_snapshot_appears(tmp_path, pair, message):
    with pytest.raises(ValueError, match=message), SnapshotWriter(
            tmp_path / "snap", project="p", created_at=CREATED_AT, criteria_version=1, filters={}) as writer:
        writer.add_pair("train", prompt="fine", chosen="a", rejected="b")
        writer.add_pair("train", **pair)
    assert not (tmp_path / "snap").exists()


def test_tampered_file_is_rejected_naming_it(tmp_path):
    write_rows(tmp_path / "snap")
    path = tmp_path / "snap" / "train.jsonl"
    path.write_text(path.read_text().replace('"2"', '"7"'))

    with pytest.raises(SnapshotError, match=r"train\.jsonl does not match its sha256"):
        snapshot.load(tmp_path / "snap")


def test_missing_file_is_rejected_naming_it(tmp_path):
    write_rows(tmp_path / "snap")
    (tmp_path / "snap" / "test.jsonl").unlink()

    with pytest.raises(SnapshotError, match=r"test\.jsonl is listed in manifest\.json but missing"):
        snapshot.load(tmp_path / "snap")


def test_unknown_format_version_is_rejected(tmp_path):
    write_rows(tmp_path / "snap")
    manifest_path = tmp_path / "snap" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format"] = "pairwise.snapshot/2"
    manifest_path.write_text(json.dumps(manifest))

    with pytest.raises(SnapshotError, match=r"manifest\.json has format 'pairwise\.snapshot/2'.*upgrade Pairwise"):
        snapshot.load(tmp_path / "snap")


def test_missing_snapshot_and_missing_manifest_are_clear_errors(tmp_path):
    with pytest.raises(SnapshotError, match="does not exist"):
        snapshot.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SnapshotError, match=r"manifest\.json is missing"):
        snapshot.load(tmp_path / "empty")


def test_snapshot_error_is_a_value_error():
    assert issubclass(SnapshotError, ValueError)


def test_an_empty_test_split_loads_with_its_columns(tmp_path):
    with SnapshotWriter(tmp_path / "snap", project="p", created_at=CREATED_AT, criteria_version=None,
                        filters={}) as writer:
        writer.add_pair("train", prompt="q", chosen="a", rejected="b")

    data = snapshot.load(tmp_path / "snap")
    assert len(data["test"]) == 0
    assert set(data["test"].column_names) == {"prompt", "chosen", "rejected", "meta"}
