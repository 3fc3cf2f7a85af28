"""The long-lived lanes of an overlapped cycle (stage_launcher: lanes; docs/training.md, "The staged cycle").

With the other launchers every generate and update is a process that loads its version, does its stage and exits, so
each cycle pays the trainer's construction twice, an optimizer resume and a fresh process's first step. Here each lane
is one process that stays:

- the generation lane keeps its model and, when the trainer has written a newer version, loads that version's weights
  into it (the weights file only: what a vLLM engine's weight update does), then samples the batch as the generate
  stage does: the same prompts, the same seed, the same records;
- the update lane keeps one GRPOTrainer training: its `rollout_func` waits for the next version's request and answers
  with that batch's scored records, and after each step the trainer's full checkpoint (optimizer, scheduler, RNG) is
  written as the next version, as the update stage writes it.

The cycle sends each lane one request per batch or version over a pipe and reads back the stage's record, so its
scheduling, staleness checks, ledger and the files a version or a batch leaves are those of the other launchers. A lane
that dies is started again (counted as a restart) and given the same request: the generation lane samples the batch
again from its inputs; the update lane resumes from the last version written, whose step had not been saved.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
import time
from pathlib import Path

from training.errors import PairwiseInputError
from training.grpo.stages import (
    SPAWNED_AT_ENV,
    RecordedModelScores,
    RecordedRewards,
    StageClock,
    _write_stage_record,
    checked_weights,
    generate_batch,
    generation_trainer,
    load_run_config,
    needs_recorded_correction,
    recorded_rollouts,
    scored_records_for_update,
    set_torch_threads,
    update_record,
    update_trainer,
    write_next_version,
)
from training.grpo.versions import read_version, version_name, version_path

LANES = ("generate", "update")


def load_version_weights(model, folder: Path) -> None:
    """Version `folder`'s weights into the live `model`, in place. Every parameter must come from the file, except one
    tied to a parameter that does (a language model head that shares the embedding)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise PairwiseInputError(f"{folder} holds no .safetensors weights; the generation lane loads versions that the "
                                 "update wrote (safetensors)")
    state: dict = {}
    for path in files:
        state.update(load_file(path))
    result = model.load_state_dict(state, strict=False)
    parameters = dict(model.named_parameters(remove_duplicate=False))
    loaded = {parameters[name].data_ptr() for name in state if name in parameters}
    untied = [name for name in result.missing_keys if name not in parameters or parameters[name].data_ptr() not in loaded]
    if result.unexpected_keys or untied:
        raise RuntimeError(f"{folder}: the weights do not fit the generation lane's model (missing {untied[:3]}, "
                           f"unexpected {result.unexpected_keys[:3]})")


class GenerationLane:
    """Generates batch after batch with one model, loading a version's weights when it changes."""

    def __init__(self, run: Path):
        self.run = Path(run)
        self.config = load_run_config(self.run)
        set_torch_threads(self.config)
        self.trainer = None
        self.version: int | None = None

    def generate(self, *, batch: int, version: int, cold_start_s: float) -> dict:
        clock = StageClock()
        clock.cold_start_s = cold_start_s
        # Hashed when the lane loads a version; the weights it keeps in memory are the ones it hashed.
        meta = read_version(self.run, version) if version == self.version else checked_weights(self.run, version, clock)
        if self.trainer is None:
            self.trainer = generation_trainer(self.config, self.run, version, batch=batch)
        elif version != self.version:
            load_version_weights(self.trainer.model, version_path(self.run, version))
        self.version = version
        clock.lap("loading")
        return generate_batch(self.trainer, self.run, self.config, batch=batch, version=version, meta=meta, clock=clock)

    def close(self) -> None:
        pass


class _StopLane(Exception):
    """Raised inside the trainer's rollout_func to end a trainer the lane no longer wants."""


class UpdateLane:
    """One trainer that trains version after version, each step on the batch the cycle hands it."""

    def __init__(self, run: Path):
        self.run = Path(run)
        self.config = load_run_config(self.run)
        self.requests: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.next_version: int | None = None   # the version the live trainer trains next
        self.staging = self.run / "versions" / ".update-lane"
        self.current: dict | None = None

    def update(self, *, version: int, cold_start_s: float) -> dict:
        clock = StageClock()
        clock.cold_start_s = cold_start_s
        # Refused here, in one line, before a trainer is built or the live one waits on records it cannot use.
        records, stale, source = scored_records_for_update(self.run, version, self.config)
        if self.thread is None or not self.thread.is_alive() or self.next_version != version:
            self._stop_trainer()
            checked_weights(self.run, version, clock)  # the trainer resumes from these weights
            self._start_trainer(version)
        self.requests.put({"version": version, "clock": clock, "records": records, "stale": stale, "source": source})
        status, value = self._result(version)
        if status != "ok":
            self._stop_trainer()
            raise value
        self.next_version = version + 1
        return value

    def _result(self, version: int) -> tuple[str, object]:
        """The trainer's answer to the request for `version`; an error if the trainer stopped without one."""
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                if self.thread is not None and self.thread.is_alive():
                    continue
                try:
                    return self.results.get_nowait()
                except queue.Empty:
                    return "error", RuntimeError(f"the update lane's trainer stopped before it trained "
                                                 f"{version_name(version)} (its max_steps reached?)")

    def _start_trainer(self, version: int) -> None:
        from transformers import TrainerCallback

        from training.grpo.ledger import Ledger

        set_torch_threads(self.config)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.ledger = Ledger()
        self.rewards = RecordedRewards([])
        self.model_scores = RecordedModelScores([]) if self.config.reward_model else None
        lane = self

        class VersionEachStep(TrainerCallback):
            """After each step: the trainer's checkpoint becomes the next version; its record goes back to the cycle."""

            step_ended = 0.0

            def on_step_end(self, args, state, control, **kwargs):
                control.should_save = True
                self.step_ended = time.perf_counter()

            def on_save(self, args, state, control, **kwargs):
                lane._write_version(self.step_ended)

        self.trainer = update_trainer(self.config, self.run, version, staging=self.staging, rewards=self.rewards,
                                      model_scores=self.model_scores, rollout_func=self._rollouts,
                                      callbacks=[VersionEachStep()], ledger=self.ledger)
        resume = str(version_path(self.run, version)) if version > 0 else None
        self.next_version = version
        self.thread = threading.Thread(target=self._train, args=(resume,), name="update-lane-trainer", daemon=True)
        self.thread.start()

    def _train(self, resume: str | None) -> None:
        try:
            self.trainer.train(resume_from_checkpoint=resume)
        except _StopLane:
            pass
        except BaseException as error:  # the waiting request gets it, as a stage's error
            self.current = None
            self.results.put(("error", error))

    def _rollouts(self, prompts, trainer) -> dict:
        request = self.requests.get()
        if request is None:
            raise _StopLane()
        self.current = request
        version, records = request["version"], request["records"]
        step = trainer.state.global_step
        if version != step:
            raise PairwiseInputError(f"{self.run}: the update lane's trainer is at step {step}, asked to train "
                                     f"{version_name(version)}")
        self.rewards.records = records
        if self.model_scores is not None:
            self.model_scores.records = records
            self.model_scores.identity = records[0]["reward_model"] if records else None
        trainer.recorded_correction = needs_recorded_correction(records, stale=request["stale"])  # as the update stage
        trainer.provenance = {r["rollout_id"]: r for r in records}
        request["clock"].lap("loading")
        return recorded_rollouts(records, prompts, source=request["source"], batch=version)

    def _write_version(self, step_ended: float) -> None:
        current, self.current = self.current, None
        version, clock = current["version"], current["clock"]
        clock.lap("update")
        clock.move(max(0.0, time.perf_counter() - step_ended), "update", "saving")
        self.trainer.flush_rollouts()
        made = write_next_version(self.run, version, self.staging / f"checkpoint-{version + 1}",
                                  self.trainer.processing_class, source=current["source"], stale=current["stale"])
        shutil.rmtree(self.staging / f"checkpoint-{version + 1}", ignore_errors=True)
        clock.lap("export")
        record = update_record(clock, self.trainer, version=version, made=made, records=current["records"],
                               stale=current["stale"], ledger=self.ledger)
        self.ledger.groups = type(self.ledger.groups)()  # each version's record counts its own step's groups
        _write_stage_record(self.run, version, "update", record)
        self.results.put(("ok", record))

    def _stop_trainer(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.requests.put(None)
            self.thread.join()
        self.thread = None
        self.requests = queue.Queue()
        self.results = queue.Queue()

    def close(self) -> None:
        self._stop_trainer()
        shutil.rmtree(self.staging, ignore_errors=True)


def lane_main(kind: str, run: str, env: dict, connection) -> None:
    """A lane process: requests from the cycle until it closes the pipe; each answered with ("ok", the stage's record)
    or ("error", one line)."""
    started = time.time()
    os.environ.update(env)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the stages' records are in their batch folders)
    spawned = float(env.get(SPAWNED_AT_ENV, started))
    cold_start_s = max(0.0, time.time() - spawned)
    lane = GenerationLane(Path(run)) if kind == "generate" else UpdateLane(Path(run))
    code = 0
    try:
        while True:
            try:
                request = connection.recv()
            except EOFError:
                break
            if request is None:
                break
            try:
                if kind == "generate":
                    record = lane.generate(batch=request["batch"], version=request["version"], cold_start_s=cold_start_s)
                else:
                    record = lane.update(version=request["version"], cold_start_s=cold_start_s)
                connection.send(("ok", record))
            except PairwiseInputError as error:
                connection.send(("error", str(error)))
            except Exception as error:  # the cycle fails the run with this line
                connection.send(("error", f"{type(error).__name__}: {error}"))
            cold_start_s = 0.0  # paid once per lane process
    finally:
        try:
            lane.close()
        except Exception:  # leaving anyway
            code = 1
        sys.stdout.flush()
        os._exit(code)
