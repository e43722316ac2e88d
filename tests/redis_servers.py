"""Private redis-server processes for tests: a single server and a 3-master cluster on loopback.

Each server runs on a free port in its own temp directory and is shut down by the fixture that
started it. When the redis-server binary is missing the tests skip, or fail under CI=true.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from .servers import IN_CI, port_open


def require_binaries(*names: str) -> None:
    """Skip (fail under CI=true) unless every named executable is on PATH."""
    missing = [n for n in names if shutil.which(n) is None]
    if not missing:
        return
    message = f"{', '.join(missing)} not found on PATH"
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires it (install redis-server/redis-tools)")
    pytest.skip(message)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """Return a free port whose cluster bus port (port + 10000) is free and valid too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 30000)  # below Linux's ephemeral range
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("found no free port pair for a cluster node")


def _wait(predicate: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _cli(port: int, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout


class RedisServer:
    """One redis-server on 127.0.0.1:``port`` with its data in ``directory``.

    ``stop()`` saves the dataset (so a restart finds the items again) and ``start()`` restarts
    it on the same port.
    """

    def __init__(self, directory: Path, port: int | None = None, *extra: str) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "server.log", "ab")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()  # the child keeps its own descriptor

        def up() -> bool:
            if not self.running:
                log = (self.directory / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server on port {self.port} exited:\n{log}")
            return port_open("127.0.0.1", self.port, 0.2)

        _wait(up, f"redis-server on port {self.port}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Save and shut down; returns when the port is closed."""
        if not self.running:
            return
        assert self.process is not None
        try:
            _cli(self.port, "SHUTDOWN", "SAVE")
        except subprocess.CalledProcessError:
            pass  # redis-cli reports the dropped connection of a successful SHUTDOWN
        except subprocess.TimeoutExpired:
            self.process.kill()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


class RedisCluster3:
    """Three cluster-enabled masters (no replicas) joined with ``redis-cli --cluster create``."""

    def __init__(self, directory: Path) -> None:
        self.nodes = [
            RedisServer(
                directory / f"node{i}",
                free_cluster_port(),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            )
            for i in range(3)
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{n.port}" for n in self.nodes),
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )

            def ready() -> bool:
                return all(
                    "cluster_state:ok" in _cli(n.port, "CLUSTER", "INFO")
                    and "cluster_known_nodes:3" in _cli(n.port, "CLUSTER", "INFO")
                    for n in self.nodes
                )

            _wait(ready, "the cluster to report cluster_state:ok", timeout=30)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()
