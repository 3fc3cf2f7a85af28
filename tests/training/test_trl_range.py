"""The GRPO trainer overrides private methods of TRL's GRPOTrainer (training/trl_private.py lists them), so it names
the TRL range it was written for and refuses any other in one line, before a run starts."""

import pytest

from training.errors import PairwiseInputError

pytest.importorskip("trl", reason="the training extras are not installed")

from training import trl_private as guard


def test_the_installed_trl_is_in_the_range_and_pyproject_names_the_same_range():
    import tomllib
    from pathlib import Path

    import trl

    guard.check_trl_version(trl.__version__)  # the pinned TRL (constraints.txt) is accepted
    low, high = guard.SUPPORTED_TRL
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    wanted = [line for extra in project["optional-dependencies"].values() for line in extra if line.startswith("trl")]
    assert wanted == [f"trl>={low},<{high}"]


@pytest.mark.parametrize("installed", ["0.24.0", "1.15.2", "1.17.0", "2.0.0"])
def test_another_trl_is_refused_in_one_line_naming_the_range(installed):
    with pytest.raises(PairwiseInputError) as refused:
        guard.check_trl_version(installed)
    assert str(refused.value) == (
        f"TRL {installed} is installed, but Pairwise's GRPO trainer overrides private methods of TRL's GRPOTrainer "
        "written for TRL >=1.16,<1.17; install a TRL in that range (pip install 'trl>=1.16,<1.17')")


def test_importing_the_grpo_trainer_runs_the_guard(monkeypatch):
    import importlib
    import sys

    monkeypatch.setattr(guard, "SUPPORTED_TRL", (guard.Version("0.1"), guard.Version("0.2")))
    monkeypatch.delitem(sys.modules, "training.grpo.trainer", raising=False)
    with pytest.raises(guard.UnsupportedTRL, match="written for TRL >=0.1,<0.2"):
        importlib.import_module("training.grpo.trainer")
