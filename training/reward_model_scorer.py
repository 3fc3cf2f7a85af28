"""A trained reward model as a scorer: one number per (prompt, answer), with the model's identity beside it.

Used wherever a reward model's judgment is needed after training: GRPO's `reward_model` reward
(training.grpo.rewards), `python -m training rescore --reward-model` and the app's model reviewer
(`python -m training reward-score`). Each answer is scored alone, built into a sequence exactly as
`python -m training reward` trained on it (sequence_ids): a chat prompt through the chat
template with the answer as the assistant's message, a plain prompt followed by the answer and the
end-of-sequence token.

One length rule everywhere a reward model meets a sequence (fits_max_length): a sequence longer than the
max_length the model was trained under is not scored, never cut. Training drops such pairs (TRL's RewardTrainer,
counted in the run's results), test scoring leaves them out, and every scorer here answers None for such an
answer ("cannot score this") and counts it: reward-score writes a null score and the count, a model reviewer
shows how many pairs it left out for it, rescoring and GRPO count them (GRPO passes None to TRL, which treats
the completion as unscored by this reward function).

The identity is `reward_model@sha256:...`, the content hash of the checkpoint's weight files: a rollout
scored by one reward model is never mistaken for one scored by another, as a verifier's `name@version`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from training.errors import PairwiseInputError
from training.padding import right_padded

DEFAULT_MAX_LENGTH = 1024  # RewardConfig's (and DPOConfig's) default, used when the checkpoint's run.json says nothing
DEFAULT_BATCH_SIZE = 8


def sequence_ids(tokenizer, row: dict, key: str) -> list[int]:
    """Token ids of the prompt followed by row[key] ("chosen" or "rejected"), as RewardTrainer builds them:
    through the chat template for conversational rows, else the text with the end-of-sequence token added.
    training.reward trains and evaluates on these; they live here so that scoring never imports TRL."""
    if isinstance(row["prompt"], list):
        return list(tokenizer.apply_chat_template(row["prompt"] + row[key], tokenize=True,
                                                  return_dict=True)["input_ids"])
    answer = row[key]
    eos = tokenizer.eos_token or ""
    if not answer.endswith(eos):
        answer += eos
    return list(tokenizer(row["prompt"] + answer)["input_ids"])


def fits_max_length(ids: list[int], max_length: int | None) -> bool:
    """The one length rule of a reward model (module docstring): whether a sequence is short enough to score.
    Cutting a longer one would show the model a sequence unlike any it was trained on (training drops them)."""
    return max_length is None or len(ids) <= max_length


def over_max_length_line(count: int, total: int, max_length: int | None, noun: str) -> str:
    """How a count of sequences the rule left out is said wherever results are shown."""
    return (f"{count} of {total} {noun} longer than max_length ({max_length} tokens) not scored "
            "(a reward model scores only what fits the length it was trained under)")


def sequence_rewards(model, sequences: list[list[int]], *, batch_size: int, pad_id: int) -> list[float]:
    """The classifier's one output per sequence. Shapes: input (B, T) right-padded, logits (B, 1); the model
    reads the last token that is not padding, as in training."""
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    rewards: list[float] = []
    with torch.no_grad():
        for start in range(0, len(sequences), batch_size):
            input_ids, attention = right_padded(sequences[start : start + batch_size], pad_id)
            logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
            rewards.extend(logits[:, 0].float().tolist())
    model.train(was_training)
    return rewards


def reward_model_identity(content_hash: str) -> str:
    """What rollouts and scores record as their scorer: `reward_model@sha256:...`."""
    return f"reward_model@{content_hash}"


def load_reward_model(folder: Path, *, device: str | None = None):
    """(model, tokenizer) of a reward-model checkpoint, ready to score: one output, a pad token, in eval mode."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True, num_labels=1)
    if model.config.pad_token_id is None:  # the classifier reads the last token that is not padding
        model.config.pad_token_id = tokenizer.pad_token_id
    if device is not None:
        model.to(device)
    model.eval()
    return model, tokenizer


def trained_max_length(folder: Path) -> int | None:
    """The max_length the checkpoint's reward run trained under (run.json beside checkpoint/), else the default."""
    from training.run_folder import checkpoint_run_record

    value = ((checkpoint_run_record(folder) or {}).get("config") or {}).get("max_length", DEFAULT_MAX_LENGTH)
    return value if isinstance(value, int) and value > 0 else None


class RewardModelScorer:
    """Loads a reward-model checkpoint once; `score(prompts, answers)` returns one float per answer, or None for
    an answer whose sequence is longer than the length the model was trained under (fits_max_length).

    `over_max_length` counts those answers and `seconds` the time spent scoring, over every call."""

    def __init__(self, checkpoint: str | os.PathLike, *, batch_size: int = DEFAULT_BATCH_SIZE, key: str = "reward_model",
                 device: str | None = None, content_hash: str | None = None):
        from training.run_folder import check_reward_model_checkpoint, checkpoint_content_hash

        self.path = check_reward_model_checkpoint(checkpoint, key=key)
        # A caller that hashed the weights already (to refuse early) passes the hash: a large model's files are
        # read once, not twice.
        self.content_hash = content_hash or checkpoint_content_hash(self.path)
        self.identity = reward_model_identity(self.content_hash)
        self.batch_size = batch_size
        self.max_length = trained_max_length(self.path)
        self.model, self.tokenizer = load_reward_model(self.path, device=device)
        self.seconds = 0.0
        self.over_max_length = 0

    def sequence(self, prompt: str | list[dict], answer: str) -> list[int]:
        """Token ids of the prompt and the answer as the reward run built them (sequence_ids)."""
        if isinstance(prompt, list):
            row = {"prompt": prompt, "answer": [{"role": "assistant", "content": answer}]}
        else:
            row = {"prompt": prompt, "answer": answer}
        return sequence_ids(self.tokenizer, row, "answer")

    def check_prompts(self, prompts: list[str | list[dict]], *, where: str) -> None:
        """One line naming the first prompt the model cannot tokenize (a chat prompt for a checkpoint without a
        chat template, text the tokenizer refuses), before any scoring starts."""
        for number, prompt in enumerate(prompts, start=1):
            try:
                self.sequence(prompt, "")
            except Exception as error:
                reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise PairwiseInputError(f"{where}: prompt {number} cannot be tokenized by reward model {self.path} "
                                         f"({reason}); use prompts in the form the reward model was trained on "
                                         "(plain text, or chat messages for a checkpoint with a chat template)") from None

    def score(self, prompts: list[str | list[dict]], answers: list[str]) -> list[float | None]:
        import time

        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
        started = time.perf_counter()
        sequences = [self.sequence(prompt, answer) for prompt, answer in zip(prompts, answers, strict=True)]
        fitting = [number for number, ids in enumerate(sequences) if fits_max_length(ids, self.max_length)]
        rewards: list[float | None] = [None] * len(sequences)
        if fitting:
            scored = sequence_rewards(self.model, [sequences[number] for number in fitting],
                                      batch_size=self.batch_size, pad_id=self.tokenizer.pad_token_id)
            for number, reward in zip(fitting, scored, strict=True):
                rewards[number] = reward
        self.over_max_length += len(sequences) - len(fitting)
        self.seconds += time.perf_counter() - started
        return rewards


# --- `python -m training reward-score` ---------------------------------------------------------------------


def read_answers_file(path: str | os.PathLike) -> list[dict]:
    """JSONL rows {"id": str, "prompt": str | chat messages, "answer": str}; every bad line named in one line."""
    from training.tasks import check_prompt

    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise PairwiseInputError(f"answers file {source} cannot be read ({error}); give a UTF-8 JSONL file") from None
    rows, errors, seen = [], [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            errors.append(f"line {number}: not JSON ({error.msg})")
            continue
        if not isinstance(row, dict) or set(row) != {"id", "prompt", "answer"}:
            errors.append(f"line {number}: needs exactly the keys id, prompt, answer")
            continue
        problems = check_prompt(row["prompt"])
        if not isinstance(row["id"], str) or not row["id"]:
            problems.append("id must be a non-empty string")
        elif row["id"] in seen:
            problems.append(f"id {row['id']!r} appears twice")
        if not isinstance(row["answer"], str):
            problems.append("answer must be a string")
        if problems:
            errors.append(f"line {number}: " + ", ".join(problems))
            continue
        seen.add(row["id"])
        rows.append(row)
    if errors:
        raise PairwiseInputError(" ".join(f"answers file {source}: {'; '.join(errors)}; fix these lines and run "
                                          "again".split()))
    return rows


def reward_score_main(args) -> int:
    """`python -m training reward-score --reward-model CKPT --answers IN.jsonl --out OUT.json`: every answer's
    score under one reward model, written aside and renamed, so a reader never sees half a file."""
    from training.run_folder import write_json_atomic

    rows = read_answers_file(args.answers)
    if not rows:
        raise PairwiseInputError(f"answers file {args.answers} holds no answers; write one JSON row per answer")
    scorer = RewardModelScorer(args.reward_model, batch_size=args.batch_size)
    scorer.check_prompts([row["prompt"] for row in rows], where=f"answers file {args.answers}")
    scores = scorer.score([row["prompt"] for row in rows], [row["answer"] for row in rows])
    write_json_atomic(Path(args.out), {
        "format": "pairwise.reward_scores/1",
        "reward_model": {"path": str(scorer.path.resolve()), "content_hash": scorer.content_hash,
                         "identity": scorer.identity, "max_length": scorer.max_length},
        # null: longer than max_length, not scored (fits_max_length)
        "scores": [{"id": row["id"], "score": score} for row, score in zip(rows, scores, strict=True)],
        "over_max_length": scorer.over_max_length,
    })
    print(f"scored {len(rows) - scorer.over_max_length} answers with {scorer.identity[:36]}... into {args.out} "
          f"({scorer.seconds:.1f} s)")
    if scorer.over_max_length:
        print(over_max_length_line(scorer.over_max_length, len(rows), scorer.max_length, "answers")
              + "; their score is null")
    return 0
