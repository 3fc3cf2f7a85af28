"""manage.py export_snapshot: what lands in the snapshot, what is left out and why, and bad input."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from annotate.exports.models import Export
from annotate.quality.selectors import agreement_report_for_project
from training import snapshot

from .conftest import read_jsonl

pytestmark = pytest.mark.django_db

DECIDED = {"p-0000": "a", "p-0001": "a", "p-0002": "b", "p-0003": "b", "p-0004": "a", "p-0008": "a",
           "p-0009": "b", "p-0010": "a", "p-0011": "a"}


def export(slug, out, *options) -> str:
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("export_snapshot", slug, "--out", str(out), *options, stdout=stdout, stderr=stderr)
    return stdout.getvalue()


def all_rows(folder, extension="jsonl") -> list[dict]:
    return read_jsonl(folder / f"train.{extension}") + read_jsonl(folder / f"test.{extension}")


def test_every_decided_pair_becomes_one_row_with_the_majority_answer_chosen(voted_project, tmp_path):
    out = tmp_path / "snap"
    printed = export("voted", out, "--test-ratio", "0.3")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["snapshot_id"] in printed

    rows = all_rows(out)
    by_prompt = {row["meta"]["prompt_id"]: row for row in rows}
    assert set(by_prompt) == set(DECIDED)
    for prompt_id, winner in DECIDED.items():
        row = by_prompt[prompt_id]
        i = int(prompt_id.split("-")[1])
        answers = {"a": f"Answer 0 to question {i}: {2 * i}", "b": f"Answer 1 to question {i}: {2 * i + 1}"}
        assert row["prompt"] == [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}]
        assert row["chosen"] == [{"role": "assistant", "content": answers[winner]}]
        assert row["rejected"] == [{"role": "assistant", "content": answers["b" if winner == "a" else "a"]}]
    assert by_prompt["p-0003"]["meta"]["votes"] == {"a": 1, "b": 2, "tie": 0, "both_bad": 0}
    assert by_prompt["p-0003"]["meta"]["consensus_share"] == pytest.approx(2 / 3, abs=1e-6)
    assert by_prompt["p-0003"]["meta"]["decided_by"] == "strict_majority"
    assert by_prompt["p-0000"]["meta"]["decided_by"] == "unanimous"
    assert by_prompt["p-0000"]["meta"]["criteria_version"] == 1

    counts = manifest["counts"]
    assert counts["excluded"]["tie_majority"] == 1 and counts["excluded"]["both_bad_majority"] == 1
    assert counts["excluded"]["no_consensus"] == 1
    assert counts["train"] + counts["test"] == 9 and counts["pairs_considered"] == 12
    assert counts["test"] > 0 and counts["train"] > 0
    assert manifest["format"] == "pairwise.snapshot/1" and manifest["project"] == "voted"
    assert manifest["criteria_version"] == 1
    assert manifest["filters"]["test_ratio"] == 0.3 and "strict majority" in manifest["filters"]["consensus_rule"]
    assert manifest["agreement"]["judgments"] == 36 and manifest["agreement"]["pairs_with_overlap"] == 12
    report = agreement_report_for_project(project=voted_project, bootstrap=0)
    assert manifest["agreement"]["percent_agreement"] == pytest.approx(report["percent_agreement"])
    assert manifest["agreement"]["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(
        report["krippendorff_alpha"]["nominal"]["value"])
    assert set(manifest["files"]) == {"train.jsonl", "test.jsonl"}

    train_prompts = {row["meta"]["prompt_id"] for row in read_jsonl(out / "train.jsonl")}
    test_prompts = {row["meta"]["prompt_id"] for row in read_jsonl(out / "test.jsonl")}
    assert not train_prompts & test_prompts

    data = snapshot.load(out)
    assert len(data["train"]) + len(data["test"]) == 9
    assert Export.objects.get().status == "done"


def test_the_same_data_and_filters_give_byte_identical_files(voted_project, tmp_path):
    export("voted", tmp_path / "one", "--seed", "7", "--min-judgments", "2")
    export("voted", tmp_path / "two", "--seed", "7", "--min-judgments", "2")
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    one, two = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("one", "two"))
    assert one["files"] == two["files"] and one["snapshot_id"] == two["snapshot_id"]
    assert {key for key in one if one[key] != two[key]} <= {"created_at"}
    export("voted", tmp_path / "three", "--seed", "8", "--min-judgments", "2")
    three = json.loads((tmp_path / "three" / "manifest.json").read_text())
    assert three["snapshot_id"] != one["snapshot_id"]


def test_filters_leave_out_what_they_say(voted_project, tmp_path):
    def prompts(*options) -> set[str]:
        out = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        export("voted", out, *options)
        return {row["meta"]["prompt_id"] for row in all_rows(out)}

    assert prompts("--min-agreement", "1") == {"p-0000", "p-0001", "p-0002", "p-0009", "p-0010", "p-0011"}
    assert "p-0004" not in prompts("--exclude-ties") and "p-0003" in prompts("--exclude-ties")
    assert prompts("--tag", "code") == {"p-0001", "p-0003", "p-0009", "p-0011"}
    assert prompts("--gold", "only") == {"p-0000"}
    assert "p-0000" not in prompts("--gold", "exclude")
    assert prompts("--min-judgments", "4") == set()
    assert prompts("--judged-until", "2000-01-01") == set()
    assert len(prompts("--judged-since", "2000-01-01")) == 9
    assert prompts("--criteria-version", "2") == set()


def test_standard_rows_and_parquet_files_round_trip_through_the_loader(voted_project, tmp_path):
    export("voted", tmp_path / "std", "--format", "standard")
    row = read_jsonl(tmp_path / "std" / "train.jsonl")[0]
    assert isinstance(row["prompt"], str) and isinstance(row["chosen"], str)
    export("voted", tmp_path / "pq", "--parquet")
    data = snapshot.load(tmp_path / "pq")
    assert len(data["train"]) + len(data["test"]) == 9
    assert data["train"][0]["meta"]["pair_id"] > 0


def test_a_tampered_file_is_refused_by_name(voted_project, tmp_path):
    out = tmp_path / "snap"
    export("voted", out)
    with open(out / "train.jsonl", "a") as handle:
        handle.write("\n")
    with pytest.raises(snapshot.SnapshotError, match="train.jsonl does not match its sha256"):
        snapshot.load(out)


def test_bad_input_is_one_line_and_writes_nothing(voted_project, tmp_path):
    with pytest.raises(CommandError, match=r"^--min-agreement: 1.5 must be a number from 0 to 1$"):
        export("voted", tmp_path / "a", "--min-agreement", "1.5")
    # The error names the option as typed, not the filter's plural field name.
    with pytest.raises(CommandError, match=r"^--criteria-version: "):
        export("voted", tmp_path / "a", "--criteria-version", "0")
    with pytest.raises(CommandError, match="no project 'nope'"):
        export("nope", tmp_path / "b")
    (tmp_path / "taken").mkdir()
    with pytest.raises(CommandError, match="already exists; a snapshot is never overwritten"):
        export("voted", tmp_path / "taken")
    # A path under a file is refused before an export is recorded or a vote read.
    (tmp_path / "a-file").write_text("not a folder")
    exports_before = Export.objects.count()
    with pytest.raises(CommandError, match=r"a-file/deeper/snap: .*a-file is a file, not a folder; choose a folder"):
        export("voted", tmp_path / "a-file" / "deeper" / "snap")
    assert Export.objects.count() == exports_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "taken"]
    assert not any((tmp_path / "taken").iterdir())


def test_the_summary_says_none_when_nothing_was_excluded(make_project, make_user, tmp_path):
    from tests.conftest import import_rows

    from .conftest import judge, voted_items

    project = make_project(slug="agreed", overlap=1, retest_rate=0)
    import_rows(project, voted_items(4))
    judge(project, make_user("dee"), lambda assignment: "a")
    printed = export("agreed", tmp_path / "snap", "--test-ratio", "0")
    assert printed.strip().endswith("4 train and 0 test row(s) from 4 pair(s); excluded: none")


def test_a_prompt_the_standard_format_cannot_hold_fails_the_export_and_leaves_no_folder(
        make_project, make_user, tmp_path):
    from tests.conftest import import_rows

    from .conftest import judge

    project = make_project(slug="chat", overlap=1, retest_rate=0)
    import_rows(project, [{
        "prompt_id": "multi", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "responses": [{"text": "4", "model": "m", "model_version": "1"}, {"text": "5", "model": "m", "model_version": "2"}],
    }])
    judge(project, make_user("ann"), lambda assignment: "a")
    with pytest.raises(CommandError, match="prompt multi .*standard format needs a single user message"):
        export("chat", tmp_path / "snap", "--format", "standard")
    assert list(tmp_path.iterdir()) == []
    assert Export.objects.get().status == "failed"


def test_an_export_with_no_test_rows_warns_in_the_preview_the_command_and_the_page(voted_project, tmp_path, client,
                                                                                   make_user):
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("export_snapshot", "voted", "--preview", "--test-ratio", "0", stdout=stdout, stderr=stderr)
    line = ("no test rows: a test share of 0 over 9 prompt(s) drew none, so a run trained on this snapshot cannot be "
            "judged on held-out pairs; raise the test share or export more prompts")
    assert json.loads(stdout.getvalue())["warnings"] == [line]
    assert stderr.getvalue() == f"warning: {line}\n"

    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("export_snapshot", "voted", "--out", str(tmp_path / "snap"), "--test-ratio", "0", stdout=stdout,
                 stderr=stderr)
    assert "9 train and 0 test row(s)" in stdout.getvalue() and f"warning: {line}" in stderr.getvalue()

    client.force_login(make_user("ada", "admin"))
    page = client.get("/projects/voted/exports/").content.decode()
    assert ">no test split</span>" in page
    preview = client.post("/projects/voted/exports/", {"action": "preview", "test_ratio": "0"}).content.decode()
    assert f"Warning: {line}." in preview
    with_test = client.post("/projects/voted/exports/", {"action": "preview", "test_ratio": "0.3"}).content.decode()
    assert 'id="preview"' in with_test and "Warning:" not in with_test
