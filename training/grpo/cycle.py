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
from training.grpo.vllm_answers import mismatch_summary

# Set in the stages the cycle starts: the cycle writes run.json, not they.
STAGE_OF_CYCLE_ENV = "PAIRWISE_STAGE_OF_CYCLE"
# How often a lane looks for the other lane's output.
POLL_S = 0.05
# A stage process that dies (killed, out of memory) is started again this many times before the run fails.
STAGE_RETRIES = 3
# Both lanes waiting this long at once, each for what only the other makes: nothing can change any more.
WEDGE_GRACE_S = 2.0


# The launcher config an update of several data-parallel processes (`processes` above 1) starts with: on CPU they
# join over gloo, one process per GPU otherwise (docs/deploy.md, "More than one process").
DATA_PARALLEL_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "accelerate" / "cpu_ddp.yaml"


def stage_command(stage: str, run: Path, args, processes: int = 1) -> list[str]:
    """`python -m training STAGE --run R ARGS`; the update of a run with `processes` above 1 as that many
    data-parallel processes under accelerate's launcher (generate and score stay one process each)."""
    if stage == "update" and processes > 1:
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(DATA_PARALLEL_CONFIG),
                "--num_processes", str(processes), "-m", "training", stage, "--run", str(run), *args]
    return [sys.executable, "-m", "training", stage, "--run", str(run), *args]


# What switching is made of, as the stages time it: process start to the stage's first line, loading a version (and
# the trainer, optimizer state), hashing its weights against version.json, the trainer's checkpoint and records
# written, and the next version's folder (tokenizer, hash, rename).
SWITCHING_PARTS = ("cold_start_s", "loading_s", "hashing_s", "saving_s", "export_s")


def retain_versions(run: Path, config) -> dict:
    """The versions the config's retention lets go removed, after an update wrote a new one; v0000 is kept while it
    is the KL term's reference."""
    from training.grpo.versions import prune_versions

    reference_is_v0000 = config.beta > 0 and not config.reference_checkpoint
    return prune_versions(run, keep_last=config.keep_last_versions, keep_every=config.keep_every_versions,
                          max_staleness=config.max_staleness, keep=(0,) if reference_is_v0000 else ())


def _correction_summary(steps: list[dict]) -> dict:
    """TRL's importance-sampling correction over the updates that trained on older answers: the ratio's extremes and
    mean, the mean shares masked and negligible, and the smallest effective sample size."""
    def mean(key):
        values = [step[key] for step in steps if key in step]
        return round(sum(values) / len(values), 6) if values else None

    return {"updates": len(steps),
            "ratio_min": min((step["min"] for step in steps if "min" in step), default=None),
            "ratio_mean": mean("mean"),
            "ratio_max": max((step["max"] for step in steps if "max" in step), default=None),
            "masked_share": mean("masked_share"), "negligible_share": mean("negligible_share"),
            "effective_sample_size_min": min((step["effective_sample_size"] for step in steps
                                              if "effective_sample_size" in step), default=None)}


def _retention_summary(run: Path) -> dict:
    import json

    from training.grpo.versions import RETENTION_RECORD, versions_folder

    path = versions_folder(run) / RETENTION_RECORD
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"versions_removed": [], "bytes_freed": 0}
    return {"versions_removed": len(record["versions_removed"]), "bytes_freed": record["bytes_freed"],
            "removed": record["versions_removed"]}


def _covered(intervals: list[tuple[float, float]], began: float, ended: float) -> float:
    """Seconds of [began, ended] inside at least one of the intervals."""
    total, reach = 0.0, began
    for left, right in sorted(intervals):
        left, right = max(left, reach), min(right, ended)
        if right > left:
            total += right - left
            reach = right
    return total


class StageFailed(RuntimeError):
    pass


class CycleWedged(StageFailed):
    """A wait of the scheduler that passed its bound (stage_timeout_s), or lanes that wait for each other."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or an operator's stop): handled as Ctrl-C is, with its reason in run.json."""


class Watchdog:
    """Every wait of the scheduler says here what it waits for and since when. A thread fails the cycle, in one line
    naming the wait, when a bounded wait passes stage_timeout_s, or when every lane of the run waits at once (each for
    what only the other makes); every wait sees the failure at its next poll and raises it."""

    def __init__(self, bound_s: float, lanes: tuple[str, ...]):
        self.bound_s = bound_s
        self.lanes = lanes
        self.lock = threading.Lock()
        self.waits: dict[object, tuple[str, float, bool, str | None]] = {}
        self.failure: BaseException | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cycle-watchdog", daemon=True)
        self._thread.start()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = error

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    @contextlib.contextmanager
    def waiting(self, what: str, *, lane: str | None = None, bounded: bool = True):
        """`what`: the thing awaited, as the failure names it; `lane`: the lane that waits for the other one (None:
        the cycle waits for a stage process)."""
        key = object()
        with self.lock:
            self.waits[key] = (what, time.monotonic(), bounded, lane)
        try:
            yield
        finally:
            with self.lock:
                self.waits.pop(key, None)

    def until(self, condition, what: str, *, lane: str, bounded: bool = True) -> float:
        """Wait for `condition()`; return the seconds waited."""
        began = time.perf_counter()
        with self.waiting(what, lane=lane, bounded=bounded):
            while not condition():
                self.check()
                time.sleep(POLL_S)
        return time.perf_counter() - began

    def _watch(self) -> None:
        while not self._closed.wait(POLL_S * 4):
            now = time.monotonic()
            with self.lock:
                waits = list(self.waits.values())
            stage_running = any(lane is None for *_, lane in waits)
            for what, since, bounded, lane in waits:
                # A lane that waits while a stage runs waits on that stage, whose own wait is bounded.
                if bounded and now - since > self.bound_s and (lane is None or not stage_running):
                    waiter = f"the {lane} lane" if lane else "the cycle"
                    self.fail(CycleWedged(f"{waiter} waited more than {self.bound_s:g} s (stage_timeout_s) for {what}"))
            waiting = {lane: (what, since) for what, since, _, lane in waits if lane is not None}
            if len(self.lanes) > 1 and set(self.lanes) <= waiting.keys() \
                    and now - max(since for _, since in waiting.values()) > WEDGE_GRACE_S:
                each = " while ".join(f"the {lane} lane waits for {waiting[lane][0]}" for lane in self.lanes)
                self.fail(CycleWedged(f"the cycle is wedged: {each}; neither can make what the other waits for"))

    def close(self) -> None:
        self._closed.set()
        self._thread.join()


class StageLauncher:
    """Starts one stage as its own process and waits for it; records each launch's wall time and restarts.

    launcher "python": a fresh interpreter per stage (`python -m training <stage>`), as a Slurm job pays it.
    launcher "forkserver": each stage is still its own process that loads its version, does its stage, writes and
    exits, but it is forked from a server that imported torch, transformers and TRL once, so the interpreter start
    and imports (seconds on a small model) are not paid again in every cycle; loading and saving still are.
    An update of `processes` above 1 is a fresh `accelerate launch` whatever the launcher: its processes join one
    process group, which a fork of this process cannot be."""

    def __init__(self, run: Path, *, threads: int | None, launcher: str, watchdog: Watchdog, on_lane_start=None,
                 processes: int = 1):
        self.run = run
        self.processes = processes
        self.watchdog = watchdog
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
            with self.watchdog.waiting(f"stage {stage} {' '.join(args)} to finish"):
                if stage == "update" and self.processes > 1:
                    code, message = self._fresh(stage, args)
                elif self.launcher == "lanes" and stage in ("generate", "update"):
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
        return lane.request(request, self.watchdog.check)

    def close(self, *, kill: bool = False) -> None:
        for lane in self._lanes.values():
            lane.close(kill=kill)
        self._lanes.clear()

    def _environment(self) -> dict:
        env = {SPAWNED_AT_ENV: repr(time.time()), STAGE_OF_CYCLE_ENV: "1"}
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        return env

    def _fresh(self, stage: str, args: tuple) -> tuple[int, str]:
        command = stage_command(stage, self.run, args, self.processes)
        process = subprocess.Popen(command, env={**os.environ, **self._environment()}, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        with _killed_unless_waited_for(process):
            while True:
                try:
                    stdout, stderr = process.communicate(timeout=POLL_S * 10)
                    break
                except subprocess.TimeoutExpired:
                    self.watchdog.check()
        lines = (stderr or stdout).strip().splitlines()
        return process.returncode, lines[-1] if lines else "no output"

    def _forked(self, stage: str, args: tuple) -> tuple[int, str]:
        receive, send = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_stage_child, args=(stage, str(self.run), args, self._environment(),
                                                                    send), name=f"stage-{stage}")
        process.start()
        send.close()
        with _killed_unless_waited_for(process):
            while process.is_alive():
                process.join(POLL_S)
                self.watchdog.check()
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

    def request(self, request: dict, check) -> tuple[int, str]:
        """(0, "") when the lane did the stage; (its exit code, why) when it died (negative: killed) or refused.
        `check()` is called while the lane works and raises when the cycle fails."""
        try:
            self.connection.send(request)
            while not self.connection.poll(POLL_S):  # a dead lane makes the pipe readable (end of file)
                check()
            status, message = self.connection.recv()
        except (EOFError, OSError):  # it died with the request: the caller starts a new lane and asks again
            self.process.join()
            return self.process.exitcode if self.process.exitcode is not None else -1, "the lane process died"
        return (0, "") if status == "ok" else (1, message)

    def close(self, *, kill: bool = False) -> None:
        """Asks the lane to finish; `kill`: the cycle failed, the lane may be wedged itself, so it is not waited for."""
        with contextlib.suppress(OSError):
            self.connection.send(None)
        self.process.join(timeout=0 if kill else 60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


@contextlib.contextmanager
def _killed_unless_waited_for(process):
    """A stage process the cycle stops waiting for (the watchdog failed the cycle, SIGTERM, Ctrl-C) is killed, not
    left running on its own."""
    try:
        yield
    except BaseException:
        process.kill()
        raise


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
        self.watchdog = Watchdog(config.stage_timeout_s,
                                 ("generation", "update") if config.mode == "overlapped" else ("update",))
        self.launch = StageLauncher(self.path, threads=config.torch_threads, launcher=config.stage_launcher,
                                    watchdog=self.watchdog, on_lane_start=self._lane_started,
                                    processes=config.processes)
        self.stale_dropped = 0
        self.batch_lock = threading.Lock()  # a batch's staleness check and its drop, one lane at a time
        self.regenerate: set[int] = set()   # batches dropped as stale after the generation lane passed them
        self.idle = {"generation": 0.0, "update": 0.0}
        self.launch_wall = {"generate": 0.0, "score": 0.0, "update": 0.0}
        self.failure: BaseException | None = None
        # With the forkserver launcher the cycle scores in its own process, keeping the verifiers' worker processes
        # (and the reward model) between batches, as in-process GRPO does; with "python" every stage is a process.
        self.scorers = Scorers(self.path) if config.stage_launcher in ("forkserver", "lanes") else None

    def close(self, *, failed: bool = False) -> None:
        self.watchdog.close()
        self.launch.close(kill=failed)
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

    def _usable(self, batch: int) -> bool:
        """Whether batch `batch` has scored records fresh enough for the version that trains it (version `batch`);
        stale ones are dropped (counted) and the batch is marked to be generated again."""
        with self.batch_lock:
            made_by = _scored_version(self.path, batch)
            if made_by is None:
                return False
            if batch - made_by <= self.k and made_by <= batch:
                return True
            self.stale_dropped += len(read_records(batch_folder(self.path, batch) / SCORED))
            for name in (SCORED, GENERATED):
                (batch_folder(self.path, batch) / name).unlink(missing_ok=True)
            self.regenerate.add(batch)
            return False

    def _update(self, version: int) -> None:
        self._show(update={"version": version_name(version), "state": "updating"})
        written = version_path(self.path, version + 1) / "version.json"
        self._timed("update", "--version", str(version), done=written.is_file)
        self._show(update={"version": version_name(version + 1), "state": "written"})
        retain_versions(self.path, self.config)

    def run_staged(self, start: int) -> None:
        for version in range(start, self.steps):
            if not self._usable(version):
                self._make_batch(version, version)
            self._update(version)

    def run_overlapped(self, start: int) -> None:
        """The generation lane (a thread driving the generate and score stages) makes batch after batch, each with the
        newest version once that is at most k behind the batch, and first any batch the update side dropped as stale;
        the update side (this thread) trains each version on its batch. Every wait goes through the watchdog."""
        done = threading.Event()

        def generation_lane() -> None:
            cursor = start  # the next batch in order; the lane makes a dropped batch before it
            try:
                while True:
                    def ready(batch=cursor) -> bool:
                        return done.is_set() or bool(self.regenerate) or (
                            batch < self.steps and (latest_version(self.path) or 0) >= batch - self.k)

                    if cursor < self.steps:
                        what = f"version {version_name(max(0, cursor - self.k))} (to generate batch {cursor})"
                    else:  # every batch is made; a batch the update drops would be made again
                        what = "a batch dropped as stale (every batch is made)"
                    self.idle["generation"] += self.watchdog.until(ready, what, lane="generation",
                                                                   bounded=cursor < self.steps)
                    if done.is_set():
                        return
                    with self.batch_lock:
                        batch = min(self.regenerate) if self.regenerate else cursor
                        self.regenerate.discard(batch)
                    if batch == cursor:
                        cursor += 1
                    if not self._usable(batch):
                        self._make_batch(batch, latest_version(self.path) or 0)
            except BaseException as error:
                self.watchdog.fail(error)

        lane = threading.Thread(target=generation_lane, name="generation-lane", daemon=True)
        lane.start()
        try:
            for version in range(start, self.steps):
                self.idle["update"] += self.watchdog.until(
                    lambda version=version: self._usable(version),
                    f"batch {version} (generated by {version_name(max(0, version - self.k))} or later, and scored)",
                    lane="update")
                self.watchdog.check()
                self._update(version)
        except BaseException as error:
            self.watchdog.fail(error)  # the generation lane's waits stop too
            raise
        finally:
            done.set()
            lane.join()
        self.watchdog.check()

    # --- the ledger -----------------------------------------------------------------------------------------------

    def ledger(self, *, start: int, wall_s: float) -> dict:
        rows = []
        intervals = []
        for batch in range(start, self.steps):
            generate, score, update = (_stage_json(self.path, batch, stage) for stage in ("generate", "score", "update"))
            split = {key: round(sum(part.get(key, 0.0) for part in (generate, score, update)), 3)
                     for key in SWITCHING_PARTS}
            switching = sum(split.values())
            intervals += [(part["began_at"], part["ended_at"]) for part in (generate, score, update)
                          if "began_at" in part and "ended_at" in part]
            rows.append({
                "batch": batch, "generated_by": generate.get("version"), "trained": update.get("version"),
                "made": update.get("made"), "lag": update.get("max_lag", 0),
                "generation_s": generate.get("generation_s", 0.0), "verification_s": score.get("verification_s", 0.0),
                "update_s": update.get("update_s", 0.0), "switching_s": round(switching, 3), **split,
                "tokens_generated": generate.get("tokens_generated", 0), "max_length": generate.get("max_length", 0),
                "completions": generate.get("completions", 0), "loss": update.get("loss"),
                "correction": update.get("correction"), "update_world_size": update.get("world_size", 1),
                "generation_engine": generate.get("generation_engine", "transformers"),
                "sampler_mismatch": generate.get("sampler_mismatch"),
                # The CPU of the processes that load the policy (the score stage may run in the cycle's own process).
                "stage_cpu_s": round(sum(part.get("cpu_s", 0.0) for part in (generate, update)), 3),
            })
        totals = {key: round(sum(row[key] for row in rows), 3)
                  for key in ("generation_s", "verification_s", "update_s", "switching_s")}
        ended = time.time()
        tokens = sum(row["tokens_generated"] for row in rows)
        completions = sum(row["completions"] for row in rows)
        return {
            "mode": self.config.mode, "max_staleness": self.k, "cycles": len(rows), "wall_s": round(wall_s, 2),
            **totals,
            "switching_share": round(totals["switching_s"] / wall_s, 4) if wall_s > 0 else None,
            "switching_split_s": {key: round(sum(row[key] for row in rows), 3) for key in SWITCHING_PARTS},
            # Wall time in which no stage of the run ran: a scheduler's queue, the cycle's own start, pauses.
            "queue_idle_s": round(max(0.0, wall_s - _covered(intervals, ended - wall_s, ended)), 3),
            "tokens_generated": tokens, "completions": completions,
            "mean_length": round(tokens / completions, 2) if completions else 0.0,
            "max_length": max((row["max_length"] for row in rows), default=0),
            "retention": _retention_summary(self.path),
            "stale_correction": _correction_summary([row["correction"] for row in rows
                                                     if row["correction"] and row["lag"]]),
            # vLLM's answers against the training forward on the same weights, and TRL's correction of them at lag 0
            "sampler_mismatch": mismatch_summary([row["sampler_mismatch"] for row in rows]),
            "sampler_correction": _correction_summary([row["correction"] for row in rows
                                                       if row["correction"] and not row["lag"]
                                                       and row["sampler_mismatch"]]),
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
    for key, value in ledger.get("switching_split_s", {}).items():
        name = "  " + key.removesuffix("_s").replace("_", " ")
        lines.append(f"{name:<28}{value:>10.1f}{value / wall:>14.0%}")
    for lane, value in ledger["idle_s"].items():
        lines.append(f"{lane + ' lane idle':<28}{value:>10.1f}{value / wall:>14.0%}")
    if "queue_idle_s" in ledger:
        lines.append(f"{'queue and idle (no stage)':<28}{ledger['queue_idle_s']:>10.1f}"
                     f"{ledger['queue_idle_s'] / wall:>14.0%}")
    correction = ledger.get("stale_correction") or {}
    if correction.get("updates"):
        lines.append(f"stale answers corrected in {correction['updates']} updates: weight min {correction['ratio_min']:.3g}"
                     f", mean {correction['ratio_mean']:.3g}, max {correction['ratio_max']:.3g}; masked "
                     f"{correction['masked_share']:.0%}, below 0.001 {correction['negligible_share']:.0%}; effective "
                     f"sample size down to {correction['effective_sample_size_min']:.2f}")
    mismatch = ledger.get("sampler_mismatch")
    if mismatch:
        lines.append(f"vLLM against the training forward over {mismatch['batches']} batches, {mismatch['tokens']} tokens: "
                     f"|log p difference| mean {mismatch['mean_abs']:.3g}, max {mismatch['max_abs']:.3g}; KL estimate "
                     f"k3 {mismatch['kl_k3']:.3g} (k1 {mismatch['kl_k1']:.3g})")
    retention = ledger.get("retention") or {}
    if retention.get("versions_removed"):
        lines.append(f"retention removed {retention['versions_removed']} versions, {retention['bytes_freed']:,} bytes")
    lines.append(f"tokens generated {ledger['tokens_generated']} (mean length {ledger['mean_length']}, max "
                 f"{ledger['max_length']}); records dropped as stale {ledger['records_dropped_stale']}; stage restarts "
                 f"{ledger['stage_restarts']}")
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------------------------


def run_cycle(config, config_path: Path, *, prepare_only: bool = False, resume: bool = False) -> dict:
    """Run (or resume) a staged or overlapped GRPO run; return its final run record. prepare_only: create the run
    folder and version v0000 and return, for stages that a scheduler runs one by one."""
    from training.grpo.rollouts import ROLLOUT_FORMAT
    from training.grpo.run import (
        check_kl_reference_kept,
        grpo_task_inputs,
        reward_functions,
        reward_model_record,
        reward_model_scorer,
    )
    from training.run_folder import (
        RecordStatus,
        RunFolder,
        checkpoint_content_hash,
        utc_now,
    )
    from training.snapshot import file_sha256
    from training.tasks import write_tasks
    from training.trl_setup import resume_setting, start_run_record, world_size

    if world_size() > 1:  # N cycles would each start every stage, all writing one run folder
        raise PairwiseInputError(
            f"mode {config.mode} runs its cycle as one process and starts the update as processes: {config.processes} "
            "itself; start it with `python -m training cycle --config FILE`, not under accelerate launch")
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
    base_path, reference_path, tasks, tokenizer, rows = grpo_task_inputs(config)  # the in-process run's checks
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
    start_run_record(run, config, kind="grpo", base_path=base_path, base_hash=base_hash, launches_its_processes=True,
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
    failed = True
    try:
        with _terminated_on_sigterm():
            if config.mode == "overlapped":
                cycle.run_overlapped(start)
            else:
                cycle.run_staged(start)
        failed = False
    except KeyboardInterrupt as error:
        run.update(status=RecordStatus.INTERRUPTED, ended_at=utc_now(), error=str(error) or "interrupted")
        raise
    except StageFailed as error:
        run.update(status=RecordStatus.FAILED, ended_at=utc_now(), error=str(error))
        raise PairwiseInputError(f"{run.path}: {error}; fix the cause and set resume_from_checkpoint: true to go on "
                                 "from the last version") from None
    except PairwiseInputError as error:  # a stage's refusal, raised in this process (the cycle's own scoring)
        run.update(status=RecordStatus.FAILED, ended_at=utc_now(), error=str(error))
        raise
    except BaseException as error:
        run.update(status=RecordStatus.FAILED, ended_at=utc_now(), error=f"{type(error).__name__}: {error}")
        raise
    finally:
        cycle.close(failed=failed)
    return _finish(run, cycle, config, started=started, base_path=base_path, base_hash=base_hash, scorer=scorer)


@contextlib.contextmanager
def _terminated_on_sigterm():
    """SIGTERM raises Terminated in the cycle's thread, so run.json says why the run stopped instead of "running"."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise Terminated("stopped by SIGTERM; resume it with resume_from_checkpoint: true")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    # A stage the cycle started: the cycle keeps run.json. A stage a scheduler started (a Slurm job) says in it what it
    # did, so the run page follows the run between prepare and finish.
    shown = os.environ.get(STAGE_OF_CYCLE_ENV) is None and (run / "run.json").is_file()
    if args.stage == "generate":
        record = stages.generate_stage(run, args.batch, args.version)
        changes = {"generation": {"batch": args.batch, "version": record["version"], "state": "generated"}}
    elif args.stage == "score":
        record = stages.score_stage(run, args.batch)
        changes = {"generation": {"batch": args.batch, "version": _stage_json(run, args.batch, "generate").get("version"),
                                  "state": "scored"}}
    else:
        from training.trl_setup import is_main_process

        record = stages.update_stage(run, args.version)
        if not is_main_process():  # an update launched as several processes: the main one reports it
            return 0
        changes = {"update": {"version": record["made"], "state": "written"}}
        if shown:  # a scheduler's update job: no cycle process to apply the retention
            retain_versions(run, stages.load_run_config(run))
    if shown:
        _show_stage(run, **changes)
    print(json.dumps(record, sort_keys=True))
    return 0


def _show_stage(run: Path, **changes) -> None:
    """run.json's cycle, changed by a stage job: under a lock, since an overlapped run's generate and update jobs
    may end at once; the count of versions written read from versions/."""
    import fcntl

    from training.run_folder import RunFolder

    folder = RunFolder(run)
    with open(run / ".run.json.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder.record = folder.read_record() or {}
        cycle = folder.record.get("cycle") or {}
        folder.update(cycle={**cycle, **changes, "state": "running", "versions": (latest_version(run) or 0) + 1})


def parse_version(text: str) -> int:
    """A version given as 3 or v0003."""
    return version_number(text) if text.startswith("v") else int(text)
