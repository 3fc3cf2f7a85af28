"""A policy version of a staged cycle registered as a checkpoint is never removed by the cycle's retention."""

import json

import pytest

from annotate.runs.checkpoints import checkpoint_register
from training.grpo.versions import KEEP_FILE, prune_versions, version_path

pytestmark = pytest.mark.django_db


def test_a_registered_version_is_kept_when_retention_removes_its_neighbours(tmp_path):
    run = tmp_path / "cycle-run"
    for number in range(8):
        folder = version_path(run, number)
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(f"weights of version {number}".encode())
        (folder / "version.json").write_text(json.dumps({"version": number}))
    registered = checkpoint_register(uri=str(version_path(run, 2)), name="cycle-v2")
    assert (version_path(run, 2) / KEEP_FILE).read_text() == "registered in Pairwise as checkpoint cycle-v2\n"

    record = prune_versions(run, keep_last=1, keep_every=None, max_staleness=1, keep=(0,))
    kept = sorted(path.name for path in (run / "versions").iterdir() if path.is_dir() and not path.name.startswith("."))
    assert kept == ["v0000", "v0002", "v0005", "v0006", "v0007"]  # the base, the registered one, the live ones
    assert "v0002" not in record["versions_removed"] and "v0001" in record["versions_removed"]
    assert version_path(run, 2).joinpath("model.safetensors").is_file() and registered.uri.endswith("v0002")


def test_a_version_whose_registration_is_refused_gets_no_keep_file(tmp_path):
    # KEEP is written before the checkpoint row (so cleanup cannot remove the folder in between) and taken back when
    # the row is not written: a refused name leaves the version free for retention.
    run = tmp_path / "cycle-run"
    for number in (1, 2):
        folder = version_path(run, number)
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(f"weights of version {number}".encode())
    checkpoint_register(uri=str(version_path(run, 1)), name="cycle-v1")
    with pytest.raises(Exception, match="cycle-v1"):
        checkpoint_register(uri=str(version_path(run, 2)), name="cycle-v1")
    assert not (version_path(run, 2) / KEEP_FILE).exists()
    assert (version_path(run, 1) / KEEP_FILE).is_file()
