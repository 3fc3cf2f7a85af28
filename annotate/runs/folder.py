"""Reading a run folder as the training command writes it (docs/training.md, "The run folder").

The command rewrites run.json atomically and appends whole lines to metrics.jsonl, so a reader polling
while it runs sees either the old or the new run.json and skips a last line that is not finished yet.
Of the training side only training.run_folder (for the folder's file names), which itself needs only the standard
library and orjson: web and worker processes never import the training stack.
"""

from dataclasses import dataclass, field
from pathlib import Path

from annotate.jobs import JobStatus
from training.json_input import read_json_file
from training.run_folder import RecordStatus, RunFolder, metrics_rows

LOG_TAIL_CHARS = 6000

# run.json's status -> the job lifecycle's state once the command has ended (annotate/jobs.py; a Run's stored labels
# are the lifecycle's own, docs/design.md "Background work").
STATUS_OF_RECORD = {RecordStatus.COMPLETED: JobStatus.SUCCEEDED, RecordStatus.FAILED: JobStatus.FAILED,
                    RecordStatus.INTERRUPTED: JobStatus.CANCELLED}


def sidecar(folder: str | Path, suffix: str) -> Path:
    """A file beside the run folder (config, log, Slurm script): the folder itself must not exist before the
    command creates it."""
    folder = Path(folder)
    return folder.with_name(folder.name + suffix)


def log_tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    """The last `limit` characters of a log file; progress bars' carriage returns keep only their last state."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 4 * limit))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines)[-limit:]


def last_error_line(text: str) -> str:
    """The line a failed command left for its user: the training CLI's `error: ...`, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    return lines[-1] if lines else ""


@dataclass
class FolderReader:
    """Follows one run folder: new metrics rows since the last read, run.json, ledger.json, the log's tail."""

    folder: Path
    log: Path | None = None
    offset: int = 0
    rows: list[dict] = field(default_factory=list)

    def read(self) -> dict:
        paths = RunFolder(self.folder)
        self.rows.extend(self._new_metrics(paths.metrics_jsonl))
        return {
            "metrics": self.rows,
            "record": read_json_file(paths.run_json),
            "ledger": read_json_file(paths.ledger_json),
            "log_tail": log_tail(self.log) if self.log else "",
        }

    def _new_metrics(self, path: Path) -> list[dict]:
        try:
            with open(path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self.offset += len(complete)
        return metrics_rows(complete.decode("utf-8", errors="replace"))
