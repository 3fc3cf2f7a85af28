"""Config files: TRL's own config classes read by TRL's parser; every mistake is one line naming the key."""

import json

import pytest

from training.config import ConfigError, load_config
from training.dpo import DPORunConfig, load_dpo_config

REQUIRED = "base_checkpoint: ckpt\nsnapshot: snap\noutput_dir: run\n"


def write(tmp_path, text):
    path = tmp_path / "dpo.yaml"
    path.write_text(REQUIRED + text)
    return path


def test_values_are_read_with_trl_names_and_defaults(tmp_path):
    config = load_dpo_config(write(tmp_path, "learning_rate: 5e-6\nbeta: 0.2\nloss_type: ipo\nmax_steps: 3\n"))

    assert config.learning_rate == 5e-6  # YAML reads 5e-6 as text; it still counts as a number
    assert config.beta == 0.2
    assert config.loss_type == ["ipo"]
    assert config.max_steps == 3
    assert config.per_device_train_batch_size == DPORunConfig.__dataclass_fields__[
        "per_device_train_batch_size"].default


def test_typo_in_a_key_names_it_and_suggests_the_right_one(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'learnig_rate' \(did you mean 'learning_rate'\?\)"):
        load_dpo_config(write(tmp_path, "learnig_rate: 1e-5\n"))


@pytest.mark.parametrize(("line", "message"), [
    ("beta: high\n", "beta must be a number"),
    ("max_steps: 2.5\n", "max_steps must be a whole number"),
    ("use_peft: maybe\n", "use_peft must be true or false"),
    ("loss_type: [sigmoid, hingey]\n", "loss_type must be one of"),
    ("beta: 0\n", "beta must be above 0"),
    ("bf16: true\nfp16: true\n", "cannot both be true"),
    ("gradient_checkpointing: true\nactivation_checkpointing: false\n",
     r"gradient_checkpointing \(true\) and activation_checkpointing \(false\) disagree; set only gradient_checkpointing"),
])
def test_bad_values_are_one_clear_line(tmp_path, line, message):
    with pytest.raises(ConfigError, match=message) as caught:
        load_dpo_config(write(tmp_path, line))
    assert "\n" not in str(caught.value)


def test_missing_required_key_and_missing_file(tmp_path):
    path = tmp_path / "partial.yaml"
    path.write_text("snapshot: s\noutput_dir: o\n")
    with pytest.raises(ConfigError, match="required key 'base_checkpoint' is missing"):
        load_config(path, DPORunConfig)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", DPORunConfig)


def test_broken_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(REQUIRED + "beta: [0.1\n")
    with pytest.raises(ConfigError, match="line"):
        load_config(path, DPORunConfig)


def test_every_pairwise_key_has_help_and_trl_keys_are_listed_too(capsys):
    from training.cli import main

    fields = DPORunConfig.__dataclass_fields__
    for name in DPORunConfig.pairwise_keys:
        assert fields[name].metadata.get("help"), name
    assert main(["dpo", "--help-config"]) == 0
    out = capsys.readouterr().out
    # TRL's own keys work without Pairwise copying them: every DPOConfig key is listed.
    for name in ("loss_weights", "precompute_ref_log_probs", "truncation_mode", "warmup_steps", "deepspeed"):
        assert f"  {name} = " in out, name


def test_any_trl_key_is_read_without_pairwise_copying_it(tmp_path):
    config = load_dpo_config(write(tmp_path, "precompute_ref_log_probs: true\nwarmup_steps: 3\nlr_scheduler_type: cosine\n"
                                             "model_init_kwargs: {dtype: bfloat16}\nreport_to: none\n"))
    assert config.precompute_ref_log_probs is True and config.warmup_steps == 3
    assert config.lr_scheduler_type == "cosine"
    assert config.model_init_kwargs == {"dtype": "bfloat16"}
    assert config.report_to == []


def test_old_dtype_key_says_what_to_write_instead(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'dtype' \(write model_init_kwargs: \{dtype: bfloat16\} instead\)"):
        load_dpo_config(write(tmp_path, "dtype: bfloat16\n"))


def test_every_yaml_the_commands_read_is_read_by_one_reader_whose_error_names_the_line(tmp_path):
    """Config files, criteria files (annotate/review/criteria.py) and rescore's scorer settings: one reader, one
    message, aliases refused everywhere."""
    from training.config import ConfigError, yaml_config
    from training.grpo.rescore import _math_config

    scorer = tmp_path / "scorer.yaml"
    scorer.write_text("answer_weight: 0.8\nunit_weight: [0.1\n")
    with pytest.raises(ConfigError) as refused:
        _math_config(str(scorer))
    assert str(refused.value).startswith(f"--scorer {scorer}: ") and str(refused.value).endswith(
        "at line 3; fix the YAML syntax")
    with pytest.raises(ConfigError, match="line 2 repeats a value with the YAML alias"):
        yaml_config("a: &x [1, 2]\nb: *x\n", "criteria.yaml")


@pytest.mark.parametrize("value", [True, False])
def test_gradient_checkpointing_is_read_without_a_deprecation_warning(tmp_path, value):
    """transformers 5 calls the key activation_checkpointing and warns on the old name; Pairwise's documented key
    reaches the trainer under the new one, so the command's answer carries no FutureWarning."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_dpo_config(write(tmp_path, f"gradient_checkpointing: {str(value).lower()}\n"
                                                 "gradient_checkpointing_kwargs: {use_reentrant: false}\n"))
    assert [str(w.message) for w in caught if "checkpointing" in str(w.message)] == []
    assert config.gradient_checkpointing is value and config.activation_checkpointing is value
    assert config.activation_checkpointing_kwargs == {"use_reentrant": False}


def test_a_run_without_an_accelerator_does_not_ask_for_pinned_memory(tmp_path):
    """TRL's default pins the dataloader's memory; with no accelerator torch warns about it on every dataloader,
    so a CPU run's trainer arguments turn it off, and the run's own config keeps what the file said."""
    import torch

    from training.run_folder import RunFolder
    from training.trl_setup import trainer_arguments

    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator: pinned memory is wanted there")
    config = load_dpo_config(write(tmp_path, ""))
    assert config.dataloader_pin_memory is True
    args = trainer_arguments(config, RunFolder(tmp_path / "run"))
    assert args.dataloader_pin_memory is False
    assert config.dataloader_pin_memory is True


# --- nested mappings: the same rules at every depth ---------------------------------------------------------

RECIPES = {"dpo": ("training.dpo", "DPORunConfig"), "grpo": ("training.grpo.config", "GRPORunConfig"),
           "reward": ("training.reward", "RewardRunConfig")}


def recipe_config(kind: str, tmp_path, text: str):
    """Load `text` (beside the recipe's required keys) as `kind`'s config, as `python -m training KIND` does."""
    import importlib

    module, name = RECIPES[kind]
    inputs = "tasks: tasks.jsonl\n" if kind == "grpo" else "snapshot: snap\n"
    path = tmp_path / f"{kind}.yaml"
    path.write_text(f"base_checkpoint: ckpt\n{inputs}output_dir: run\n{text}")
    return load_config(path, getattr(importlib.import_module(module), name)), path


NESTED_REFUSALS = [
    ("model_init_kwargs: {trust_remote_code: true}\n",
     "model_init_kwargs.trust_remote_code is refused: it runs code shipped with a checkpoint"),
    ("model_init_kwargs: '{\"trust_remote_code\": true}'\n",
     "model_init_kwargs.trust_remote_code is refused: it runs code shipped with a checkpoint"),
    ("model_init_kwargs: '{\"token\": \"hf_abc\"}'\n", "model_init_kwargs.token is a credential"),
    ("model_init_kwargs: {dtype: float32, cache_dir: /tmp/elsewhere}\n",
     "model_init_kwargs.cache_dir is not handed to the model loader; model_init_kwargs takes only dtype, "),
    ("deepspeed: {zero_optimization: {stage: 2, offload_param: {api_key: k1}}}\n",
     "deepspeed.zero_optimization.offload_param.api_key is a credential"),
    # JSON text inside JSON text, written as a YAML string
    (f"lr_scheduler_kwargs: {json.dumps(json.dumps({'nested': json.dumps({'password': 'p'})}))}\n",
     "lr_scheduler_kwargs.nested.password is a credential"),
    ("hub_token: hf_abc\n", "hub_token is a credential"),
]


@pytest.mark.parametrize("kind", list(RECIPES))
@pytest.mark.parametrize(("text", "message"), NESTED_REFUSALS)
def test_nested_mappings_are_held_to_the_rules_of_the_top_level(tmp_path, kind, text, message):
    with pytest.raises(ConfigError) as refused:
        recipe_config(kind, tmp_path, text)
    line = str(refused.value)
    assert line.startswith(f"{tmp_path / f'{kind}.yaml'}: {message}") and "\n" not in line
    assert "hf_abc" not in line and "k1" not in line  # a credential is never repeated


def test_grpo_generation_kwargs_are_held_to_the_same_rules(tmp_path):
    with pytest.raises(ConfigError, match=r"generation_kwargs\.trust_remote_code is refused"):
        recipe_config("grpo", tmp_path, "generation_kwargs: {trust_remote_code: true}\n")


def test_nested_settings_that_are_no_credential_still_load(tmp_path):
    config, _ = recipe_config("grpo", tmp_path, (
        "model_init_kwargs: '{\"dtype\": \"float32\", \"attn_implementation\": \"eager\"}'\n"
        "generation_kwargs: {pad_token_id: 0, eos_token_id: 1}\n"
        "gradient_checkpointing_kwargs: {use_reentrant: false}\nhub_token: null\n"))
    assert config.model_init_kwargs == {"dtype": "float32", "attn_implementation": "eager"}
    assert config.generation_kwargs == {"pad_token_id": 0, "eos_token_id": 1}


# --- bounds of the knobs that would hang a run ----------------------------------------------------------------


@pytest.mark.parametrize(("kind", "line", "key", "value", "bound", "variable"), [
    ("dpo", "max_steps: 1000000000000\n", "max_steps", "1000000000000", 1_000_000, "PAIRWISE_MAX_TRAIN_STEPS"),
    ("reward", "num_train_epochs: 1e308\n", "num_train_epochs", "1e+308", 1_000, "PAIRWISE_MAX_TRAIN_EPOCHS"),
    ("grpo", "num_train_epochs: .inf\n", "num_train_epochs", "inf", 1_000, "PAIRWISE_MAX_TRAIN_EPOCHS"),
    ("dpo", "per_device_train_batch_size: 100000\n", "per_device_train_batch_size", "100000", 4_096,
     "PAIRWISE_MAX_BATCH_SIZE"),
    ("reward", "gradient_accumulation_steps: 100000\n", "gradient_accumulation_steps", "100000", 1_024,
     "PAIRWISE_MAX_GRADIENT_ACCUMULATION_STEPS"),
    ("grpo", "num_generations: 2\nper_device_train_batch_size: 100000\n", "per_device_train_batch_size",
     "100000", 4_096, "PAIRWISE_MAX_BATCH_SIZE"),
    ("grpo", "num_generations: 2048\nper_device_train_batch_size: 2048\n", "num_generations", "2048", 1_024,
     "PAIRWISE_MAX_NUM_GENERATIONS"),
    ("grpo", "max_completion_length: 100000000\n", "max_completion_length", "100000000", 131_072,
     "PAIRWISE_MAX_SEQUENCE_LENGTH"),
    ("grpo", "num_iterations: 1000\n", "num_iterations", "1000", 64, "PAIRWISE_MAX_NUM_ITERATIONS"),
])
def test_a_value_past_its_bound_names_the_key_the_bound_and_how_to_raise_it(tmp_path, monkeypatch, kind, line, key,
                                                                            value, bound, variable):
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigError) as refused:
        recipe_config(kind, tmp_path, line)
    assert str(refused.value) == (f"{tmp_path / f'{kind}.yaml'}: {key} is {value}, past the bound of {bound}; lower "
                                  f"it, or raise the bound by setting {variable} where the training command runs")
    if value not in ("inf", "1e+308"):  # a bound raised by its variable lets the value through
        monkeypatch.setenv(variable, value)
        config, _ = recipe_config(kind, tmp_path, line)
        assert str(getattr(config, key)) == value


def test_a_bound_set_to_something_else_than_a_whole_number_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PAIRWISE_MAX_TRAIN_STEPS", "lots")
    with pytest.raises(ConfigError, match=r"^environment variable PAIRWISE_MAX_TRAIN_STEPS is 'lots', not a whole "
                                          r"number of 1 or more; set it to the bound you want for max_steps"):
        recipe_config("dpo", tmp_path, "max_steps: 10\n")


def test_values_within_their_bounds_load(tmp_path, monkeypatch):
    from training.config import RUN_BOUNDS

    for variable, _ in RUN_BOUNDS.values():
        monkeypatch.delenv(variable, raising=False)
    config, _ = recipe_config("grpo", tmp_path, "max_steps: 1000000\nnum_generations: 1024\n"
                                                "per_device_train_batch_size: 1024\nmax_completion_length: 131072\n")
    assert (config.max_steps, config.num_generations, config.max_completion_length) == (1_000_000, 1024, 131_072)
