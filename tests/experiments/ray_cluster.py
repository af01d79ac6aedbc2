"""A real Ray cluster on this machine for the launcher's tests: `ray start --head` and `ray start --address`, each a
separate `--block` process in its own session, on loopback aliases (the head on 127.0.0.2, workers on 127.0.0.3,
...: Ray turns 127.0.0.1 into the machine's network address, which a test must never use), with Ray's token
authentication on (a token made for the test), free ports of their own and a short temp dir (Unix socket paths
are limited to 107 characters). `stop()` ends every process the cluster started, and nothing else: never
`ray stop`, which would end every Ray process of the user on the machine.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import blocklab
from tests.cli.test_compare_cli import alive

START_TIMEOUT_S = 180  # a busy 2-core machine took 20 s for the head
STOP_TIMEOUT_S = 30
RAY = Path(sys.executable).with_name("ray")


def free_ports(ip: str, n: int) -> list[int]:
    """`n` distinct ports free on `ip` now (bound together, so none repeats, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((ip, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def descendants(pid: int) -> list[int]:
    """Every living process below `pid`, read from /proc (Ray's workers start sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def identity(pid: int) -> tuple[int, str] | None:
    """(pid, its start time): a pid the kernel gives to another process later has another start time."""
    try:
        return pid, Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_named(root: int, name: str) -> int | None:
    """The pid of the process called `name` (its /proc comm) below `root`."""
    for pid in descendants(root):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                return pid
        except OSError:
            continue
    return None


class Node:
    def __init__(self, proc: subprocess.Popen, ip: str, log: Path, temp: Path):
        self.proc, self.ip, self.log, self.temp = proc, ip, log, temp

    def raylet(self) -> int | None:
        return process_named(self.proc.pid, "raylet")

    def alive(self) -> bool:
        return self.proc.poll() is None and self.raylet() is not None

    def worker_logs(self) -> dict[Path, int]:
        """The stderr file of each Ray worker this node started, and its size now."""
        return {f: f.stat().st_size for f in self.temp.glob("session_*/logs/worker-*.err")}

    def lines_since(self, sizes: dict[Path, int]) -> list[str]:
        """What this node's workers wrote to stderr after `sizes` (worker_logs) was taken."""
        lines = []
        for f in self.temp.glob("session_*/logs/worker-*.err"):
            with open(f, "rb") as handle:
                handle.seek(sizes.get(f, 0))
                lines += handle.read().decode(errors="replace").splitlines()
        return lines


class RayCluster:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: socket paths
        self.token = secrets.token_hex(32)
        self.nodes: list[Node] = []
        self.started = 0  # nodes started so far: each has its own temp dir, n0, n1, ...
        self.address: str | None = None
        self.seen: set[tuple[int, str]] = set()  # (pid, start time) of every process the nodes started

    def env(self, token: bool = True) -> dict:
        """The environment of the nodes (and of a client with `token`): this checkout's blocklab on the path."""
        env = dict(os.environ, RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(blocklab.__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])]
        )
        env.pop("RAY_ADDRESS", None)
        if token:
            env["RAY_AUTH_TOKEN"] = self.token
        else:
            env.pop("RAY_AUTH_TOKEN", None)
            env["RAY_AUTH_TOKEN_PATH"] = str(self.root / "no-token")
        return env

    def _launch(self, ip: str, args: list[str], prefix: list[str] = (), env: dict | None = None) -> Node:
        """A node's `ray start`, not waited for (_wait)."""
        name = f"n{self.started}"
        self.started += 1
        ports = free_ports(ip, 24)
        args = [
            *args,
            "--block",
            "--node-ip-address", ip,
            "--num-cpus", "1",
            "--num-gpus", "0",
            "--temp-dir", str(self.root / name),
            "--disable-usage-stats",
            "--node-manager-port", str(ports[0]),
            "--object-manager-port", str(ports[1]),
            "--dashboard-agent-listen-port", str(ports[2]),
            "--dashboard-agent-grpc-port", str(ports[3]),
            "--metrics-export-port", str(ports[4]),
            "--runtime-env-agent-port", str(ports[5]),
            "--worker-port-list", ",".join(map(str, ports[8:])),
            "--object-store-memory", str(100 * 2**20),
        ]  # fmt: skip
        log = self.root / f"{name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [*prefix, str(RAY), "start", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self.env(), **(env or {})},
                start_new_session=True,
            )
        node = Node(proc, ip, log, self.root / name)
        self.nodes.append(node)
        self._note(proc.pid)
        return node

    def _wait(self, node: Node, deadline: float) -> None:
        """Until the node's `ray start` says it started."""
        while "Ray runtime started" not in node.log.read_text():
            if node.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"ray start on {node.ip} did not start:\n{node.log.read_text()[-3000:]}")
            time.sleep(0.2)
        self._note(node.proc.pid)

    def _start(self, ip: str, args: list[str], prefix: list[str] = (), env: dict | None = None) -> Node:
        node = self._launch(ip, args, prefix, env)
        self._wait(node, time.time() + START_TIMEOUT_S)
        return node

    def _note(self, root: int) -> None:
        self.seen.update(filter(None, map(identity, [root, *descendants(root)])))

    def _launch_head(self, ip: str) -> Node:
        port, client, dashboard = free_ports(ip, 3)
        head = self._launch(
            ip,
            [
                "--head",
                "--port", str(port),
                "--ray-client-server-port", str(client),
                "--include-dashboard", "false",
                "--dashboard-host", ip,
                "--dashboard-port", str(dashboard),
            ],
        )  # fmt: skip
        self.address = f"{ip}:{port}"
        return head

    def start(
        self, head: str = "127.0.0.2", worker: str = "127.0.0.3", prefix: list[str] = (), env: dict | None = None
    ):
        """A head and a worker (`prefix`, `env`: add_worker's), the worker launched once the head's GCS answers:
        the rest of the head's start (its raylet, agents, log monitor) overlaps the worker's."""
        deadline = time.time() + START_TIMEOUT_S
        first = self._launch_head(head)
        host, port = self.address.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                if first.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the head's GCS did not answer:\n{first.log.read_text()[-3000:]}") from None
                time.sleep(0.1)
        second = self._launch(worker, ["--address", self.address], list(prefix), env)
        self._wait(first, deadline)
        self._wait(second, deadline)

    def add_worker(self, ip: str = "127.0.0.3", prefix: list[str] = (), env: dict | None = None) -> Node:
        """A worker node; `prefix` runs its `ray start` under another command, `env` adds to its environment."""
        return self._start(ip, ["--address", self.address], list(prefix), env)

    def remove(self, node: Node) -> None:
        """One node out of the cluster: its `ray start` ends its processes (the cluster marks it dead)."""
        self._note(node.proc.pid)
        mine = set(filter(None, map(identity, [node.proc.pid, *descendants(node.proc.pid)])))
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        _kill(mine)
        node.proc.wait(timeout=10)
        self.nodes.remove(node)

    def stop(self) -> None:
        """SIGTERM to each node's `ray start` (it ends its own processes), then SIGKILL to whatever it started that
        is still there: the processes seen below the nodes now and at their start, never any other."""
        for node in self.nodes:
            self._note(node.proc.pid)
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + STOP_TIMEOUT_S
        for node in self.nodes:
            try:
                node.proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        _kill(self.seen)
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.wait(timeout=10)


def _kill(seen: set[tuple[int, str]]) -> None:
    """SIGKILL to each (pid, start time) still running as that same process."""
    for pid, started in seen:
        if alive(pid) and identity(pid) == (pid, started):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
