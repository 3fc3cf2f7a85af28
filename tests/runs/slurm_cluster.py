"""A real one-node Slurm cluster for the tests that need one (scripts/slurm_one_node.sh): started once, in a
temporary folder with its own munge key, slurm.conf and ports, when slurmctld, slurmd and munged are installed;
stopped when the tests end. Where Slurm is missing (or the tests do not run as root, which the one-node cluster's
daemons need) the tests are skipped saying why; with PAIRWISE_REQUIRE_SERVICES set (CI) they fail instead."""

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

SCRIPT = Path(settings.BASE_DIR) / "scripts" / "slurm_one_node.sh"
START_TIMEOUT_S = 120  # the script waits at most 30 s per daemon


@dataclass(frozen=True)
class Cluster:
    folder: Path
    conf: Path

    def command(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm command (sbatch, squeue, scontrol, ...) against this cluster."""
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "SLURM_CONF": str(self.conf)})


def _unavailable(reason: str):
    if os.environ.get("PAIRWISE_REQUIRE_SERVICES"):
        pytest.fail(f"{reason}, and this run requires it", pytrace=False)
    pytest.skip(reason)


def _free_port_pair() -> int:
    """A port p with p and p + 1 free (slurmctld and slurmd): never a cluster someone else runs on this machine."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535:
            with socket.socket() as next_one:
                try:
                    next_one.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free neighbouring ports on 127.0.0.1 after 50 tries")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    missing = [name for name in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(name) is None]
    if missing:
        _unavailable(f"Slurm is not installed here ({', '.join(missing)} missing; scripts/install_slurm.sh)")
    if os.geteuid() != 0:
        _unavailable("the one-node Slurm cluster runs its daemons as root, and the tests do not run as root")
    folder = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "PAIRWISE_SLURM_CLUSTER_DIR": str(folder), "PAIRWISE_SLURM_PORT": str(_free_port_pair())}
    try:
        started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, env=env,
                                 timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/slurm_one_node.sh start ran over {START_TIMEOUT_S} s", pytrace=False)
    if started.returncode != 0:
        pytest.fail(started.stderr.strip().splitlines()[-1] if started.stderr.strip() else "slurm_one_node.sh start "
                    f"failed with exit code {started.returncode}", pytrace=False)
    cluster = Cluster(folder, folder / "slurm.conf")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)  # for the app's sbatch, squeue, scancel and sacct
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        subprocess.run([str(SCRIPT), "stop"], capture_output=True, env=env, timeout=START_TIMEOUT_S)
