"""`python -m training cycle --config F`: GRPO as a cycle of separate stages (docs/training.md, "The staged cycle").

mode staged: for each step v, the generate, score and update stages of training/grpo/stages.py run one after the
other, each as its own process (`python -m training generate|score|update`), on policy version v; the update writes
version v+1. mode overlapped (max_staleness k >= 1): a generation lane makes batch b with the newest version there
is, as long as it is at most k versions behind b, while the update lane trains; so generation of the next batch
overlaps the current update. The run folder holds what in-process GRPO's holds (run.json, metrics.jsonl, rollouts/,
ledger.json, checkpoint/) plus config.yaml, versions/ and batches/, and the ledger splits the time into
generation, verification, switching (process start, loading, saving) and update, with each lane's idle time.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from training.errors import PairwiseInputError
from training.grpo.stages import (
    GENERATED,
    SCORED,
    SPAWNED_AT_ENV,
    Scorers,
    batch_folder,
    read_records,
    run_config_path,
    score_stage,
)
from training.grpo.versions import (
    export_base_version,
    latest_version,
    version_name,
    version_number,
    version_path,
)

# How often a lane looks for the other lane's output.
POLL_S = 0.05
# A stage process that dies (killed, out of memory) is started again this many times before the run fails.
STAGE_RETRIES = 3


class StageFailed(RuntimeError):
    pass


class StageLauncher:
    """Starts one stage as its own process and waits for it; records each launch's wall time and restarts.

    launcher "python": a fresh interpreter per stage (`python -m training <stage>`), as a Slurm job pays it.
    launcher "forkserver": each stage is still its own process that loads its version, does its stage, writes and
    exits, but it is forked from a server that imported torch, transformers and TRL once, so the interpreter start
    and imports (seconds on a small model) are not paid again in every cycle; loading and saving still are."""

    def __init__(self, run: Path, *, threads: int | None, launcher: str, on_lane_start=None):
        self.run = run
        self.threads = threads
        self.launcher = launcher
        self.restarts = 0
        self.lock = threading.Lock()
        self._context = None
        self._lanes: dict[str, Lane] = {}
        self._on_lane_start = on_lane_start
        if launcher in ("forkserver", "lanes"):
            import multiprocessing

            self._context = multiprocessing.get_context("forkserver")
            self._context.set_forkserver_preload(["training.grpo.stage_imports"])

    def __call__(self, stage: str, *args: str, done=None) -> float:
        """Run the stage; a stage killed by a signal is run again, unless `done()` says its output was written whole
        before it died (an update that wrote its version and was killed before it could say so)."""
        for attempt in range(STAGE_RETRIES + 1):
            began = time.perf_counter()
            if self.launcher == "lanes" and stage in ("generate", "update"):
                code, message = self._lane(stage, args)
            else:
                code, message = (self._forked if self._context is not None else self._fresh)(stage, args)
            wall = time.perf_counter() - began
            if code == 0:
                return wall
            killed = code < 0
            if killed and done is not None and done():  # its output was whole before it died: nothing to redo
                with self.lock:
                    self.restarts += 1
                return wall
            if killed and attempt < STAGE_RETRIES:  # its inputs are intact, so run it again
                with self.lock:
                    self.restarts += 1
                continue
            raise StageFailed(f"stage {stage} {' '.join(args)} failed (exit {code}): {message}")
        raise AssertionError("unreachable")

    def _lane(self, stage: str, args: tuple) -> tuple[int, str]:
        """The stage as a request to its lane process, started (again) when it is not running."""
        with self.lock:
            lane = self._lanes.get(stage)
            if lane is None or not lane.alive():
                if lane is not None:  # it died between requests: a restart as much as one killed at work
                    lane.close()
                    self.restarts += 1
                lane = self._lanes[stage] = Lane(self._context, stage, self.run, self._environment())
                if self._on_lane_start is not None:
                    self._on_lane_start(stage, lane.pid)
        request = {key.removeprefix("--"): int(value) for key, value in zip(args[::2], args[1::2], strict=True)}
        return lane.request(request)

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()
        self._lanes.clear()

    def _environment(self) -> dict:
        env = {SPAWNED_AT_ENV: repr(time.time())}
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        return env

    def _fresh(self, stage: str, args: tuple) -> tuple[int, str]:
        command = [sys.executable, "-m", "training", stage, "--run", str(self.run), *args]
        result = subprocess.run(command, env={**os.environ, **self._environment()}, capture_output=True, text=True)
        lines = (result.stderr or result.stdout).strip().splitlines()
        return result.returncode, lines[-1] if lines else "no output"

    def _forked(self, stage: str, args: tuple) -> tuple[int, str]:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_stage_child, args=(stage, str(self.run), args, self._environment(),
                                                                    send), name=f"stage-{stage}")
        process.start()
        send.close()
        process.join()
        try:
            message = receive.recv()
        except EOFError:  # it exited without a word: it finished, or it was killed
            message = "no output"
        receive.close()
        return process.exitcode, message


class Lane:
    """A long-lived lane process (training/grpo/lanes.py) and the cycle's end of its pipe."""

    def __init__(self, context, stage: str, run: Path, env: dict):
        from training.grpo.lanes import lane_main

        self.connection, theirs = context.Pipe(duplex=True)
        self.process = context.Process(target=lane_main, args=(stage, str(run), env, theirs), name=f"lane-{stage}")
        self.process.start()
        theirs.close()
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def request(self, request: dict) -> tuple[int, str]:
        """(0, "") when the lane did the stage; (its exit code, why) when it died (negative: killed) or refused."""
        try:
            self.connection.send(request)
            status, message = self.connection.recv()
        except (EOFError, OSError):  # it died with the request: the caller starts a new lane and asks again
            self.process.join()
            return self.process.exitcode if self.process.exitcode is not None else -1, "the lane process died"
        return (0, "") if status == "ok" else (1, message)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.send(None)
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def _stage_child(stage: str, run: str, args: tuple, env: dict, report) -> None:
    """A forked stage process: the stage's command line run in this process; its one-line error sent back."""
    os.environ.update(env)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the stage's record is in its batch folder; the cycle prints)
    from training.cli import main

    code = main([stage, "--run", run, *args])
    if code != 0:
        report.send(f"exit {code} (see the stage's error above)")
    report.close()
    sys.stdout.flush()
    os._exit(code)


def _stage_json(run: Path, batch: int, stage: str) -> dict:
    import json

    path = batch_folder(run, batch) / f"{stage}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _scored_version(run: Path, batch: int) -> int | None:
    """The version that generated batch `batch`'s scored records, or None when it has none."""
    path = batch_folder(run, batch) / SCORED
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    versions = set(pq.read_table(path, columns=["policy_version"]).column("policy_version").to_pylist())
    return min(version_number(v) for v in versions) if versions else None


class Cycle:
    """Drives the stages of one run folder; every stage's output is a file, so the cycle can stop and resume anywhere."""

    def __init__(self, run, config):
        self.run = run                    # training.run_folder.RunFolder
        self.path = run.path
        self.config = config
        self.steps = config.max_steps
        self.k = config.max_staleness
        self.launch = StageLauncher(self.path, threads=config.torch_threads, launcher=config.stage_launcher,
                                    on_lane_start=self._lane_started)
        self.stale_dropped = 0
        self.idle = {"generation": 0.0, "update": 0.0}
        self.launch_wall = {"generate": 0.0, "score": 0.0, "update": 0.0}
        self.failure: BaseException | None = None
        # With the forkserver launcher the cycle scores in its own process, keeping the verifiers' worker processes
        # (and the reward model) between batches, as in-process GRPO does; with "python" every stage is a process.
        self.scorers = Scorers(self.path) if config.stage_launcher in ("forkserver", "lanes") else None

    def close(self) -> None:
        self.launch.close()
        if self.scorers is not None:
            self.scorers.close()

    def _lane_started(self, stage: str, pid: int) -> None:
        """The run page and an operator see which process each lane is (to follow it, or stop it)."""
        lanes = dict(self.run.record.get("cycle", {}).get("lanes", {}))
        lanes[stage] = pid
        self._show(lanes=lanes)

    def _show(self, **cycle) -> None:
        self.run.update(cycle={**self.run.record.get("cycle", {}), **cycle})

    def _timed(self, stage: str, *args: str, done=None) -> None:
        wall = self.launch(stage, *args, done=done)
        with self.launch.lock:
            self.launch_wall[stage] += wall

    def _make_batch(self, batch: int, version: int) -> None:
        self._show(generation={"batch": batch, "version": version_name(version), "state": "generating"})
        self._timed("generate", "--batch", str(batch), "--version", str(version))
        self._show(generation={"batch": batch, "version": version_name(version), "state": "scoring"})
        if self.scorers is not None:
            began = time.perf_counter()
            score_stage(self.path, batch, scorers=self.scorers)
            self.launch_wall["score"] += time.perf_counter() - began
        else:
            self._timed("score", "--batch", str(batch))
        self._show(generation={"batch": batch, "version": version_name(version), "state": "scored"})

    def _usable(self, batch: int, trainer_version: int) -> bool:
        """Whether batch `batch` has scored records fresh enough for the trainer at `trainer_version`; stale ones are
        dropped (counted) so that the batch is generated again."""
        made_by = _scored_version(self.path, batch)
        if made_by is None:
            return False
        if trainer_version - made_by <= self.k and made_by <= trainer_version:
            return True
        self.stale_dropped += len(read_records(batch_folder(self.path, batch) / SCORED))
        for name in (SCORED, GENERATED):
            (batch_folder(self.path, batch) / name).unlink(missing_ok=True)
        return False

    def _update(self, version: int) -> None:
        self._show(update={"version": version_name(version), "state": "updating"})
        written = version_path(self.path, version + 1) / "version.json"
        self._timed("update", "--version", str(version), done=written.is_file)
        self._show(update={"version": version_name(version + 1), "state": "written"})

    def run_staged(self, start: int) -> None:
        for version in range(start, self.steps):
            if not self._usable(version, version):
                self._make_batch(version, version)
            self._update(version)

    def run_overlapped(self, start: int) -> None:
        done = threading.Event()

        def generation_lane() -> None:
            try:
                for batch in range(start, self.steps):
                    waited = time.perf_counter()
                    while not done.is_set() and (latest_version(self.path) or 0) < batch - self.k:
                        time.sleep(POLL_S)
                    self.idle["generation"] += time.perf_counter() - waited
                    if done.is_set():
                        return
                    latest = latest_version(self.path) or 0
                    if not self._usable(batch, max(latest, batch - self.k)):
                        self._make_batch(batch, latest)
            except BaseException as error:
                self.failure = error
                done.set()

        lane = threading.Thread(target=generation_lane, name="generation-lane", daemon=True)
        lane.start()
        try:
            for version in range(start, self.steps):
                waited = time.perf_counter()
                while not self._usable(version, version):
                    if self.failure is not None:
                        raise self.failure
                    if not lane.is_alive():  # the lane dropped this batch as stale after it passed: make it here
                        self._make_batch(version, version)
                        break
                    time.sleep(POLL_S)
                self.idle["update"] += time.perf_counter() - waited
                self._update(version)
        finally:
            done.set()
            lane.join()
        if self.failure is not None:
            raise self.failure

    # --- the ledger -----------------------------------------------------------------------------------------------

    def ledger(self, *, start: int, wall_s: float) -> dict:
        rows = []
        for batch in range(start, self.steps):
            generate, score, update = (_stage_json(self.path, batch, stage) for stage in ("generate", "score", "update"))
            switching = sum(part.get(key, 0.0) for part in (generate, score, update)
                            for key in ("cold_start_s", "loading_s", "saving_s"))
            rows.append({
                "batch": batch, "generated_by": generate.get("version"), "trained": update.get("version"),
                "made": update.get("made"), "lag": update.get("max_lag", 0),
                "generation_s": generate.get("generation_s", 0.0), "verification_s": score.get("verification_s", 0.0),
                "update_s": update.get("update_s", 0.0), "switching_s": round(switching, 3),
                "tokens_generated": generate.get("tokens_generated", 0), "max_length": generate.get("max_length", 0),
                "completions": generate.get("completions", 0), "loss": update.get("loss"),
                # The CPU of the processes that load the policy (the score stage may run in the cycle's own process).
                "stage_cpu_s": round(sum(part.get("cpu_s", 0.0) for part in (generate, update)), 3),
            })
        totals = {key: round(sum(row[key] for row in rows), 3)
                  for key in ("generation_s", "verification_s", "update_s", "switching_s")}
        tokens = sum(row["tokens_generated"] for row in rows)
        completions = sum(row["completions"] for row in rows)
        return {
            "mode": self.config.mode, "max_staleness": self.k, "cycles": len(rows), "wall_s": round(wall_s, 2),
            **totals,
            "switching_share": round(totals["switching_s"] / wall_s, 4) if wall_s > 0 else None,
            "tokens_generated": tokens, "completions": completions,
            "mean_length": round(tokens / completions, 2) if completions else 0.0,
            "max_length": max((row["max_length"] for row in rows), default=0),
            "records_dropped_stale": self.stale_dropped, "stage_restarts": self.launch.restarts,
            "stage_launcher": self.config.stage_launcher,
            "stage_cpu_s": round(sum(row["stage_cpu_s"] for row in rows), 3),
            "idle_s": {lane: round(value, 3) for lane, value in self.idle.items()},
            "stage_wall_s": {stage: round(value, 3) for stage, value in self.launch_wall.items()},
            "per_cycle": rows,
        }


def format_cycle_ledger(ledger: dict) -> str:
    """The cycle's ledger as a table: where the time went, per kind of work, and each lane's idle time."""
    wall = ledger["wall_s"] or 1.0
    lines = [f"{ledger['mode']} GRPO, {ledger['cycles']} cycles, max_staleness {ledger['max_staleness']}: "
             f"{ledger['wall_s']:.1f} s wall",
             f"{'work':<28}{'seconds':>10}{'share of wall':>15}"]
    for key, name in (("generation_s", "generation"), ("verification_s", "verification"),
                      ("switching_s", "switching (start, load, save)"), ("update_s", "update")):
        lines.append(f"{name:<28}{ledger[key]:>10.1f}{ledger[key] / wall:>14.0%}")
    for lane, value in ledger["idle_s"].items():
        lines.append(f"{lane + ' lane idle':<28}{value:>10.1f}{value / wall:>14.0%}")
    lines.append(f"tokens generated {ledger['tokens_generated']} (mean length {ledger['mean_length']}, max "
                 f"{ledger['max_length']}); records dropped as stale {ledger['records_dropped_stale']}; stage restarts "
                 f"{ledger['stage_restarts']}")
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------------------------


def run_cycle(config, config_path: Path, *, prepare_only: bool = False, resume: bool = False) -> dict:
    """Run (or resume) a staged or overlapped GRPO run; return its final run record. prepare_only: create the run
    folder and version v0000 and return, for stages that a scheduler runs one by one."""
    from transformers import AutoTokenizer

    from training.grpo.difficulty import check_sandbox_for_code
    from training.grpo.rollouts import ROLLOUT_FORMAT
    from training.grpo.run import (
        check_kl_reference_kept,
        checked_reference,
        dataset_rows,
        reward_functions,
        reward_model_record,
        reward_model_scorer,
    )
    from training.run_folder import (
        RecordStatus,
        RunFolder,
        check_causal_lm_checkpoint,
        checkpoint_content_hash,
        utc_now,
    )
    from training.snapshot import file_sha256
    from training.tasks import load_tasks, write_tasks
    from training.trl_setup import resume_setting, start_run_record

    started = time.perf_counter()
    run = RunFolder(config.output_dir)
    resuming = run.path.exists() and any(run.path.iterdir())
    resume = resume or resume_setting(config) is not False
    if resuming and not resume:
        raise PairwiseInputError(f"output_dir {run.path} already exists and is not empty; choose a new output_dir, or "
                                 "set resume_from_checkpoint: true to continue that run")
    if resuming and not run_config_path(run.path).is_file():
        raise PairwiseInputError(f"output_dir {run.path} is not a staged GRPO run (no config.yaml); it cannot be "
                                 f"resumed in mode {config.mode}")
    if not resuming and resume:
        raise PairwiseInputError(f"resume_from_checkpoint is set but {run.path} holds no run; start a fresh run with "
                                 "resume_from_checkpoint: false")
    base_path = check_causal_lm_checkpoint(config.base_checkpoint)
    reference_path = checked_reference(config, base_path)
    tasks = load_tasks(config.tasks)
    check_sandbox_for_code(tasks, config.tasks)
    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    rows = dataset_rows(tasks, tokenizer, base_path)
    scorer = reward_model_scorer(config, tasks, rows)
    base_hash = checkpoint_content_hash(base_path)
    tasks_hash = file_sha256(Path(config.tasks))
    # Where every update's KL term measures against, resolved once here: a stage job may start in another folder.
    reference = None
    if config.beta > 0:
        reference = ({"path": str(reference_path.resolve()), "content_hash": checkpoint_content_hash(reference_path)}
                     if reference_path else
                     {"path": str(version_path(run.path, 0).resolve()), "content_hash": base_hash})

    previous = run.read_record() if resuming else None
    check_kl_reference_kept(previous, reference, config.output_dir)
    start_run_record(run, config, kind="grpo", base_path=base_path, base_hash=base_hash,
                     resume_from=str(run.path) if resuming else None, snapshot=None,
                     tasks={"path": str(Path(config.tasks).resolve()), "sha256": tasks_hash, "count": len(tasks),
                            "trained_on": len(tasks), "copy": "tasks.jsonl"},
                     tasks_hash=tasks_hash, rollouts={"path": "rollouts", "format": ROLLOUT_FORMAT}, scorers={},
                     reward_model=reward_model_record(scorer), reward_functions=reward_functions(config),
                     mode=config.mode, max_staleness=config.max_staleness, versions="versions", kl_reference=reference,
                     cycle=(previous or {}).get("cycle", {}))
    if not resuming:
        shutil.copyfile(config_path, run_config_path(run.path))
        write_tasks(run.path / "tasks.jsonl", tasks)
        export_base_version(run.path, base_path, base_hash)
    if prepare_only:
        run.update(cycle={"state": "prepared", "versions": (latest_version(run.path) or 0) + 1})
        return run.record
    start = latest_version(run.path) or 0
    cycle = Cycle(run, config)
    try:
        if config.mode == "overlapped":
            cycle.run_overlapped(start)
        else:
            cycle.run_staged(start)
    except KeyboardInterrupt:
        run.update(status=RecordStatus.INTERRUPTED, ended_at=utc_now(), error="interrupted")
        raise
    except StageFailed as error:
        run.update(status=RecordStatus.FAILED, ended_at=utc_now(), error=str(error))
        raise PairwiseInputError(f"{run.path}: {error}; fix the cause and set resume_from_checkpoint: true to go on "
                                 "from the last version") from None
    except BaseException as error:
        run.update(status=RecordStatus.FAILED, ended_at=utc_now(), error=f"{type(error).__name__}: {error}")
        raise
    finally:
        cycle.close()
    return _finish(run, cycle, config, started=started, base_path=base_path, base_hash=base_hash, scorer=scorer)


def _finish(run, cycle, config, *, started, base_path, base_hash, scorer) -> dict:
    """checkpoint/ (the last version's inference weights), its parent.json, the ledger and the completed record."""
    from training.grpo.run import parent_reward_model, scorers_seen
    from training.grpo.versions import copy_inference_weights
    from training.run_folder import RecordStatus, utc_now, weights_outcome
    from training.trl_setup import record_lineage

    last = latest_version(run.path)
    if run.checkpoint.exists():
        shutil.rmtree(run.checkpoint)
    copy_inference_weights(version_path(run.path, last), run.checkpoint)
    out_hash = record_lineage(run, kind="grpo", base_path=base_path, base_hash=base_hash, snapshot_id=None,
                              reward_model=parent_reward_model(scorer))
    wall_s = time.perf_counter() - started
    # Over every batch of the run, from the stages' own records, whoever ran them (this process, an earlier one that
    # was stopped, or a scheduler's jobs); wall time from the run's start, pauses included.
    ledger = cycle.ledger(start=0, wall_s=_seconds_since(run.record.get("started_at")) or wall_s)
    run.write_ledger({
        "inputs": [{"kind": "checkpoint", "path": str(base_path.resolve()), "content_hash": base_hash},
                   {"kind": "tasks", "path": str(Path(config.tasks).resolve())}],
        "outputs": [{"kind": "checkpoint", "path": "checkpoint", "content_hash": out_hash},
                    {"kind": "versions", "path": "versions", "last": version_name(last)},
                    {"kind": "rollouts", "path": "rollouts"}],
        "consumed": {"optimizer_steps": last, "completions": ledger["completions"],
                     "tokens_generated": ledger["tokens_generated"], "wall_s": round(wall_s, 2)},
        "cycle": ledger,
    })
    final = {"status": RecordStatus.COMPLETED, "ended_at": utc_now(), "wall_s": round(wall_s, 2), "steps": last,
             "output_checkpoint": {"path": str(run.checkpoint.resolve()), "content_hash": out_hash},
             "scorers": {"training": sorted(scorers_seen(run.path))},
             "results": {"ledger": {key: value for key, value in ledger.items() if key != "per_cycle"}},
             "cycle": {"state": "completed", "versions": last + 1}}
    run.update(**final, **weights_outcome({**run.record, **final}, run.read_metrics(), changed=out_hash != base_hash))
    return run.record


def _seconds_since(timestamp: str | None) -> float | None:
    from datetime import UTC, datetime

    if not timestamp:
        return None
    try:
        began = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (datetime.now(UTC) - began).total_seconds()


def cycle_main(args) -> int:
    """`python -m training cycle --config F` (and `grpo` with a mode other than in_process)."""
    from training.grpo.config import load_grpo_config

    config = load_grpo_config(args.config)
    if config.mode == "in_process":
        from training.grpo.run import grpo_main

        return grpo_main(args)
    record = run_cycle(config, Path(args.config), prepare_only=getattr(args, "prepare_only", False),
                       resume=getattr(args, "resume", False))
    if getattr(args, "prepare_only", False):
        print(f"run {record['run']}: prepared in {config.output_dir} (config.yaml, tasks.jsonl, versions/v0000); run "
              "the stages: python -m training generate|score|update --run " + str(config.output_dir))
        return 0
    print(format_cycle_ledger(record["results"]["ledger"]))
    print(f"run {record['run']}: {record['status']} after {record['steps']} cycles; versions in "
          f"{Path(config.output_dir) / 'versions'}; checkpoint {record['output_checkpoint']['path']} "
          f"({record['output_checkpoint']['content_hash'][:23]}...)")
    return 0


def stage_main(args) -> int:
    """`python -m training generate|score|update --run R ...`: one stage, one process."""
    import json

    from training.grpo import stages

    run = Path(args.run)
    if args.stage == "generate":
        record = stages.generate_stage(run, args.batch, args.version)
    elif args.stage == "score":
        record = stages.score_stage(run, args.batch)
    else:
        record = stages.update_stage(run, args.version)
    print(json.dumps(record, sort_keys=True))
    return 0


def parse_version(text: str) -> int:
    """A version given as 3 or v0003."""
    return version_number(text) if text.startswith("v") else int(text)
