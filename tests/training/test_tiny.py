"""The tiny SFT checkpoint: built offline, loads like any local Hugging Face checkpoint, deterministic."""

import json

import pytest

from training.run_folder import checkpoint_content_hash
from training.tiny import TinySFTConfig, build_char_tokenizer, build_tiny_sft, extract_final_number


def test_checkpoint_loads_through_the_auto_classes(tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint, local_files_only=True)

    assert model.config.model_type == "llama"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|user|>What is 2 + 3?<|end|><|assistant|>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    info = json.loads((tiny_checkpoint / "tiny_sft.json").read_text())
    assert set(info["heldout"]["overall"]) >= {"greedy_accuracy", "pass@1", "pass@4"}


def test_tokenizer_is_character_level():
    tokenizer = build_char_tokenizer()
    assert len(tokenizer("60 km/h", add_special_tokens=False)["input_ids"]) == len("60 km/h")


def test_same_seed_gives_the_same_weights(tmp_path):
    config = dict(steps=2, warmup_steps=1, eval_tasks=1, max_new_tokens=8)
    for name in ("a", "b"):
        build_tiny_sft(tmp_path / name, TinySFTConfig(seed=5, **config), log=lambda line: None)
    assert checkpoint_content_hash(tmp_path / "a") == checkpoint_content_hash(tmp_path / "b")


def test_existing_output_folder_is_refused(tmp_path, tiny_checkpoint):
    from training.errors import PairwiseInputError

    with pytest.raises(PairwiseInputError, match="already exists"):
        build_tiny_sft(tiny_checkpoint, TinySFTConfig(steps=1))


@pytest.mark.parametrize(("completion", "number"), [
    ("(20 + 40) / 3 = 60 / 3 = 20\nAnswer: 20 km/h", "20"),
    ("12 - 5 = 7", "7"),
    ("no idea", None),
])
def test_final_answer_extraction(completion, number):
    assert extract_final_number(completion) == number


@pytest.mark.slow
def test_tiny_sft_command_prints_accuracy_and_pass_at_k(tmp_path):
    from .conftest import run_training_cli

    out = tmp_path / "tiny"
    result = run_training_cli("tiny-sft", "--out", str(out), "--steps", "2", "--eval-tasks", "3", timeout=300)

    assert result.returncode == 0, result.stderr[-2000:]
    for words in ("greedy acc", "pass@1", "pass@4", "wall time"):
        assert words in result.stdout
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert not list(tmp_path.glob(".*partial*"))


def test_noisy_wording_keeps_every_number_and_its_unit():
    import random

    from training.tiny import noisy_wording

    prompt = "A bus travels 40 km, then 80 km. The whole trip takes 2 hours. What is its average speed?"
    noisy = [noisy_wording(prompt, random.Random(seed), 0.5) for seed in range(20)]
    assert any(text != prompt for text in noisy)
    for text in noisy:
        words = text.split(" ")
        assert len(words) == len(prompt.split(" "))
        for kept in ("40", "km,", "80", "km.", "2", "hours."):
            assert kept in words
        assert text.endswith("?")


def test_misconceived_solutions_are_wrong_in_the_taught_way():
    from training.task_families import make_tasks
    from training.tiny import misconceived_solution

    speed = make_tasks("speed", n=60, seed=3)
    for task in speed:
        wrong = misconceived_solution(task)
        first, *_ = task["meta"]["values"]
        assert wrong.endswith(f" {task['unit']}") and wrong.startswith(f"({first} +" if task["meta"]["structure"]
                                                                        == "two_legs" else f"{first} * ")
        if task["meta"]["structure"] == "one_leg" or task["meta"]["values"][2] != 2:
            # Averaging two legs is right only over exactly 2 hours; otherwise the taught answer is wrong.
            assert extract_final_number(wrong) != task["answer"]
    assert all(misconceived_solution(task) is None for task in make_tasks("rate", n=10, seed=3))


def test_misconception_share_decides_how_many_speed_solutions_are_taught_wrong():
    from training.task_families import make_tasks
    from training.tiny import SFTProblemStream

    tokenizer = build_char_tokenizer()
    tasks = make_tasks("speed", n=40, seed=1) + make_tasks("arithmetic", n=10, seed=1)

    def answers(share: float) -> list[str]:
        stream = SFTProblemStream(tokenizer, TinySFTConfig(misconception_share=share, noisy_share=0.0))
        examples = [stream.encode(task) for task in tasks]
        return [tokenizer.decode(ids[start:], skip_special_tokens=True) for ids, start in examples]

    assert answers(0.0) == [task["solution"] for task in tasks]
    all_wrong = answers(1.0)
    assert all_wrong[40:] == [task["solution"] for task in tasks[40:]]  # other families keep their solutions
    assert sum(a != t["solution"] for a, t in zip(all_wrong[:40], tasks, strict=False)) >= 30


def test_misconception_share_outside_zero_to_one_is_one_line(tmp_path):
    from .conftest import run_training_cli

    result = run_training_cli("tiny-sft", "--out", str(tmp_path / "tiny"), "--steps", "2",
                              "--misconception-share", "1.5", timeout=120)
    assert result.returncode != 0
    assert result.stderr.strip() == "error: --misconception-share must be a share from 0 to 1, got 1.5"
    assert not (tmp_path / "tiny").exists()


def test_sft_draws_fresh_problems_every_step_in_the_recipe_mix():
    from collections import Counter

    from training.tiny import TRAIN_MIX, SFTProblemStream

    tokenizer = build_char_tokenizer()

    def drawn(seed: int) -> list[tuple[str, list[int]]]:
        stream = SFTProblemStream(tokenizer, TinySFTConfig(seed=seed))
        return [(task["meta"]["family"], stream.encode(task)[0]) for task in (stream.next_task() for _ in range(2000))]

    first = drawn(3)
    assert drawn(3) == first and drawn(4) != first
    word_problems = [tuple(ids) for family, ids in first if family in ("speed", "rate")]
    # What the model sees is seldom the same twice, as it would be on every pass over a fixed pool.
    assert len(set(word_problems)) > 0.95 * len(word_problems)
    shares = Counter(family for family, _ in first)
    for family, share in TRAIN_MIX:
        assert abs(shares[family] / len(first) - share) < 0.04, (family, shares)


def test_noisy_share_decides_which_prompts_are_reworded():
    from training.task_families import make_tasks
    from training.tiny import SFTProblemStream

    tokenizer = build_char_tokenizer()
    tasks = make_tasks("speed", n=30, seed=2) + make_tasks("code", n=5, seed=2)

    def prompts(share: float) -> list[str]:
        stream = SFTProblemStream(tokenizer, TinySFTConfig(noisy_share=share, noise_rate=0.5))
        return [tokenizer.decode(ids[:start], skip_special_tokens=True) for ids, start in map(stream.encode, tasks)]

    plain, noisy = prompts(0.0), prompts(1.0)
    assert all(task["prompt"] in text for task, text in zip(tasks, plain, strict=True))
    speed = [(task, text) for task, text in zip(tasks, noisy, strict=True) if task["kind"] == "math"]
    assert sum(task["prompt"] not in text for task, text in speed) >= 0.9 * len(speed)
    assert all(task["prompt"] in text for task, text in zip(tasks, noisy, strict=True) if task["kind"] == "code")
    # the numbers survive the rewording: they are what the model must copy
    digits = [[w for w in task["prompt"].split() if any(c.isdigit() for c in w)] for task, _ in speed]
    assert all(all(w in text for w in ws) for ws, (_, text) in zip(digits, speed, strict=True))
    # the same problem drawn twice is reworded twice, differently
    stream = SFTProblemStream(tokenizer, TinySFTConfig(noisy_share=1.0, noise_rate=0.5))
    assert stream.encode(tasks[0]) != stream.encode(tasks[0])
