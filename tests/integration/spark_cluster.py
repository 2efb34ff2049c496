"""A real Spark standalone cluster for the tests: a master and workers started from pyspark's
own jars (``bin/spark-class``), each worker with its own work directory and its own
lakestate state directory (env ``LAKESTATE_STATE_DIR``, which its executors inherit), all on
127.0.0.1. Nothing is shared between the workers but the warehouse (a bucket on the tests'
S3 server: its ``AWS_*`` environment is the workers', as a cluster's own credentials are).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Worker:
    """One worker: its process, directories and log."""

    name: str
    state_dir: Path
    work_dir: Path
    log: Path
    process: subprocess.Popen | None = None

    def executor_pids(self) -> list[int]:
        """The pids of the executors this worker runs (each in a directory of its work dir)."""
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cmd = (proc / "cmdline").read_bytes()
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if EXECUTOR_CLASS.encode() in cmd and cwd.startswith(str(self.work_dir)):
                found.append(int(proc.name))
        return found


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``url`` is the master's ``spark://``."""

    root: Path
    env: dict[str, str]
    url: str = ""
    master: subprocess.Popen | None = None
    workers: list[Worker] = field(default_factory=list)

    def start(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        port = _free_port()
        self.url = f"spark://127.0.0.1:{port}"
        log = self.root / "master.log"
        self.master = self._spawn(
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
            log,
            {},
        )
        self._wait_for(log, "I have been elected leader", self.master)
        for n in range(workers):
            worker = Worker(
                f"worker{n + 1}",
                self.root / f"worker{n + 1}" / "state",
                self.root / f"worker{n + 1}" / "work",
                self.root / f"worker{n + 1}.log",
            )
            worker.work_dir.mkdir(parents=True, exist_ok=True)
            self.workers.append(worker)
            self.start_worker(worker, cores, memory)

    def start_worker(self, worker: Worker, cores: int = 1, memory: str = "1g") -> None:
        command = [WORKER_CLASS, self.url, "--host", "127.0.0.1", "--webui-port", "0"]
        command += ["--cores", str(cores), "--memory", memory, "--work-dir", str(worker.work_dir)]
        env = {"LAKESTATE_STATE_DIR": str(worker.state_dir)}
        env["SPARK_LOCAL_DIRS"] = str(worker.work_dir.parent / "local")
        offset = worker.log.stat().st_size if worker.log.exists() else 0
        worker.process = self._spawn(command, worker.log, env)
        self._wait_for(worker.log, "Successfully registered with master", worker.process, offset)

    def stop_worker(self, worker: Worker) -> None:
        """SIGKILL the worker and its executors (a machine lost)."""
        for pid in worker.executor_pids():
            _kill(pid)
        if worker.process is not None:
            _kill(worker.process.pid)
            worker.process.wait()
            worker.process = None

    def stop(self) -> None:
        for worker in self.workers:
            self.stop_worker(worker)
        if self.master is not None:
            _kill(self.master.pid)
            self.master.wait()

    def _spawn(self, args: list[str], log: Path, extra: dict[str, str]) -> subprocess.Popen:
        env = {**os.environ, **self.env, **extra, "SPARK_HOME": str(SPARK_HOME)}
        env.pop("LAKESTATE_FAULT", None)
        out = open(log, "ab")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    @staticmethod
    def _wait_for(
        log: Path, line: str, process: subprocess.Popen, offset: int = 0, timeout: float = 120
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
            if re.search(re.escape(line), text):
                return
            if process.poll() is not None:
                raise RuntimeError(f"{log.name}: exited {process.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"{log.name}: no {line!r} after {timeout} s")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
