"""The GRPO trainer overrides private methods of TRL's GRPOTrainer, so it names the TRL range it was written for
and refuses any other in one line, before a run starts."""

import pytest

from training.errors import PairwiseInputError

trainer = pytest.importorskip("training.grpo.trainer", reason="the training extras are not installed")


def test_the_installed_trl_is_in_the_range_and_pyproject_names_the_same_range():
    import tomllib
    from pathlib import Path

    import trl

    trainer.check_trl_version(trl.__version__)  # the pinned TRL (constraints.txt) is accepted
    low, high = trainer.SUPPORTED_TRL
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    wanted = [line for extra in project["optional-dependencies"].values() for line in extra if line.startswith("trl")]
    assert wanted == [f"trl>={low},<{high}"]


@pytest.mark.parametrize("installed", ["0.24.0", "1.15.2", "1.17.0", "2.0.0"])
def test_another_trl_is_refused_in_one_line_naming_the_range(installed):
    with pytest.raises(PairwiseInputError) as refused:
        trainer.check_trl_version(installed)
    assert str(refused.value) == (
        f"TRL {installed} is installed, but Pairwise's GRPO trainer overrides private methods of TRL's GRPOTrainer "
        "written for TRL >=1.16,<1.17; install a TRL in that range (pip install 'trl>=1.16,<1.17')")
