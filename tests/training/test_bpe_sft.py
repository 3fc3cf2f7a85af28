"""The realistic recipe (bpe-sft): a Qwen2 model with a trained byte-level BPE tokenizer and Qwen's chat template
loads as any local Hugging Face checkpoint, is the same from the same seed, and the training commands run on it."""

import json

import pytest

from tests.conftest import TORCH_THREADS, built_once
from tests.training.helpers import write_snapshot_run_config
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    from training.bpe_sft import BpeSFTConfig, build_bpe_sft

    return built_once(tmp_path_factory, "bpe/small", lambda out: build_bpe_sft(
        out, BpeSFTConfig(steps=2, batch_size=4, warmup_steps=1, eval_tasks=2, torch_threads=TORCH_THREADS),
        log=lambda line: None))


def test_the_checkpoint_loads_as_a_qwen2_model_whose_tokenizer_splits_text_as_it_was_trained(bpe_checkpoint):
    from transformers import AutoConfig, AutoTokenizer

    from training.bpe_sft import build_bpe_tokenizer, tokenizer_corpus
    from training.task_families import make_tasks

    assert AutoConfig.from_pretrained(bpe_checkpoint).architectures == ["Qwen2ForCausalLM"]
    loaded = AutoTokenizer.from_pretrained(bpe_checkpoint)
    assert type(loaded).__name__ == "Qwen2Tokenizer"  # what transformers picks for a qwen2 folder
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token == "<|endoftext|>"
    assert loaded.eos_token_id != loaded.pad_token_id

    # The pieces AutoTokenizer makes are the pieces the tokenizer was trained on, held-out text and unseen
    # characters included (byte-level: nothing is unknown).
    trained = build_bpe_tokenizer(tokenizer_corpus(0), 4096)
    heldout = make_tasks("speed,code,arithmetic", n=30, seed=7, variant="heldout")
    texts = [t["solution"] for t in heldout] + [t["prompt"] for t in heldout if isinstance(t["prompt"], str)]
    texts += ["Ünïcode ✓ 12345 km/h\n\tdef f(x):\n        return x * 2", "Cafe\u0301 costs €3"]
    for text in texts:
        ids = loaded(text, add_special_tokens=False)["input_ids"]
        assert ids == trained(text, add_special_tokens=False)["input_ids"], text
        assert loaded.decode(ids) == text or text.startswith("Cafe")  # NFC joins e + combining accent
    assert loaded.tokenize("12345") == ["1", "2", "3", "4", "5"]  # digits one by one, as Qwen2's pre-tokenizer
    # A real BPE: a worked solution is several characters per token, where the tiny model spends one each.
    characters = sum(len(t["solution"]) for t in heldout)
    tokens = sum(len(loaded(t["solution"], add_special_tokens=False)["input_ids"]) for t in heldout)
    assert characters / tokens > 1.8


def test_the_chat_template_renders_as_qwens(bpe_checkpoint):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bpe_checkpoint)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    whole = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": "4"}], tokenize=False)
    assert whole.endswith("<|im_start|>assistant\n4<|im_end|>\n")
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True)
    specials = [i for i in ids["input_ids"] if i in tokenizer.all_special_ids]
    assert tokenizer.convert_ids_to_tokens(specials) == ["<|im_start|>", "<|im_end|>"] * 2 + ["<|im_start|>"]


def test_the_same_seed_builds_the_same_checkpoint_and_another_seed_does_not(tmp_path):
    from training.bpe_sft import BpeSFTConfig, build_bpe_sft

    hashes = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        info = build_bpe_sft(tmp_path / name, BpeSFTConfig(steps=0, seed=seed, torch_threads=TORCH_THREADS),
                             log=lambda line: None)
        hashes.append(checkpoint_content_hash(tmp_path / name))
        assert info["heldout"] is None and info["final_loss"] is None  # random weights: nothing to evaluate
    assert hashes[0] == hashes[1] != hashes[2]
    record = json.loads((tmp_path / "a" / "bpe_sft.json").read_text())
    assert record["recipe"] == "pairwise.bpe-sft/1" and record["architecture"] == "Qwen2ForCausalLM"
    assert 5_000_000 < record["parameters"] < 50_000_000


def test_the_half_billion_configuration_has_qwen2_5_0_5bs_shape():
    import torch

    from training.bpe_sft import BpeSFTConfig, build_bpe_tokenizer, build_qwen_model, tokenizer_corpus

    tokenizer = build_bpe_tokenizer(tokenizer_corpus(0), 4096)
    with torch.device("meta"):  # the shape alone: no 2 GB of weights
        model = build_qwen_model(tokenizer, BpeSFTConfig(size="0.5b"))
    parameters = sum(p.numel() for p in model.parameters())
    assert 480_000_000 < parameters < 500_000_000  # Qwen2.5-0.5B: 494M, its tied 151,936-row embedding included
    assert model.config.num_key_value_heads == 2 and model.config.num_hidden_layers == 24


def test_dpo_reward_reward_eval_and_sample_run_on_the_bpe_model(tmp_path, bpe_checkpoint, tiny_snapshot):
    """DPO and the reward model train on it; reward-eval reads both against the snapshot's test pairs; sample writes
    a review file of the parent's and the DPO child's answers (a comparison's command), all in BPE tokens."""
    for command in ("dpo", "reward"):
        folder = tmp_path / command
        folder.mkdir()
        config = write_snapshot_run_config(folder, bpe_checkpoint, tiny_snapshot, name=command, max_steps=1,
                                           report_to=["none"], max_length=256, learning_rate=0.05)
        result = run_training_cli(command, "--config", str(config))
        assert result.returncode == 0, result.stderr[-3000:]
        record = json.loads((folder / "run" / "run.json").read_text())
        assert record["status"] == "completed"
        assert (folder / "run" / "checkpoint" / "model.safetensors").is_file()
    dpo, reward = tmp_path / "dpo" / "run" / "checkpoint", tmp_path / "reward" / "run" / "checkpoint"

    out = tmp_path / "reward-eval.json"
    result = run_training_cli("reward-eval", "--reward-checkpoint", str(reward), "--snapshot", str(tiny_snapshot),
                              "--dpo-checkpoint", str(dpo), "--dpo-reference", str(bpe_checkpoint), "--beta", "0.1",
                              "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    test_pairs = figures["snapshot"]["test_pairs"]
    assert test_pairs > 0 and figures["reward_model"]["test"]["n"] == figures["dpo"]["test"]["n"] == test_pairs
    assert 0.0 <= figures["reward_model"]["test"]["accuracy"] <= 1.0

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_id": f"p{i}", "prompt": [{"role": "user", "content": text}]}) + "\n"
                               for i, text in enumerate(["A train goes 60 km in 2 hours. How fast?", "What is 7 x 8?"])))
    review = tmp_path / "compare.jsonl"
    result = run_training_cli("sample", "--checkpoint", f"parent={bpe_checkpoint}", "--checkpoint", f"dpo={dpo}",
                              "--prompts", str(prompts), "--out", str(review), "--temperature", "1",
                              "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in review.read_text().splitlines()]
    assert rows and all({answer["model"] for answer in row["responses"]} == {"parent", "dpo"} for row in rows)


def test_lora_finds_the_qwen2_module_names(tmp_path, bpe_checkpoint, tiny_snapshot):
    config = write_snapshot_run_config(tmp_path, bpe_checkpoint, tiny_snapshot, name="lora", max_steps=1,
                                       report_to=["none"], use_peft=True, lora_r=4,
                                       lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    result = run_training_cli("dpo", "--config", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("args, message", [
    (["--size", "7b"], "argument --size: invalid choice: '7b'"),
    (["--vocab-size", "100"], "--vocab-size must be at least 512"),
    (["--steps", "-1"], "--steps must be 0 (random weights) or more"),
])
def test_bad_recipe_settings_are_one_line(tmp_path, args, message):
    result = run_training_cli("bpe-sft", "--out", str(tmp_path / "out"), *args)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_grpo_the_staged_cycle_and_eval_run_on_the_bpe_model(tmp_path, bpe_checkpoint, speed_tasks):
    """GRPO's rollouts hold the BPE model's token ids and the answer length is counted in tokens; the staged cycle
    records the same; eval scores the checkpoint on the task file."""
    from transformers import AutoTokenizer

    from tests.training.helpers import rollout_rows, write_grpo_config

    tokenizer = AutoTokenizer.from_pretrained(bpe_checkpoint)
    for mode in ("in_process", "staged"):
        config = write_grpo_config(tmp_path, bpe_checkpoint, speed_tasks, name=mode, mode=mode, max_steps=1,
                                   max_completion_length=12)
        result = run_training_cli("cycle" if mode == "staged" else "grpo", "--config", str(config))
        assert result.returncode == 0, result.stderr[-3000:]
        rows = rollout_rows(tmp_path / mode)
        assert len(rows) == 8
        for row in rows:
            assert row["length"] == len(row["completion_token_ids"]) <= 12  # tokens, not characters
            assert tokenizer.decode(row["completion_token_ids"], skip_special_tokens=True) == row["completion"]
            assert row["finish_reason"] in ("stopped", "truncated")

    out = tmp_path / "eval.json"
    result = run_training_cli("eval", "--checkpoint", str(bpe_checkpoint), "--tasks", str(speed_tasks),
                              "--max-new-tokens", "12", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["format"] == "pairwise.eval/1" and "Traceback" not in result.stderr
    assert written["checkpoints"][0]["families"]["speed"]["tasks"] == 12
