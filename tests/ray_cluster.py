"""A real multi-node Ray cluster on this machine for the Ray backend's tests and benchmark.

Ray's own test utility (ray.cluster_utils.Cluster) starts a head and one raylet per node, each a
real Ray node with its own workers; the head has no CPU, so every job runs on a worker node.
Everything listens on and talks to 127.0.0.1 only: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes
Ray use the loopback address as every node's address (Ray's single-machine setting), in this
process (set when this module is imported, which must come before `import ray`: Ray reads it
once) and in the orchestrators it starts (`env()`).
"""
from __future__ import annotations

import os
from pathlib import Path

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0"}   # and Ray's head never phones home
# Ray reads it once, when it is first imported: import this module before `ray`.
os.environ.update(LOOPBACK)
# Node deaths are noticed in about 3 s instead of Ray's default 15 s or more.
FAST_HEALTH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3,
               "health_check_initial_delay_ms": 1000}


class LocalCluster:
    """Start with `LocalCluster(nodes=2, cpus=2)`; `.address`, `.nodes`, `.add()`, `.kill(node)`."""

    def __init__(self, nodes: int, cpus: int):
        from ray.cluster_utils import Cluster
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "_system_config": FAST_HEALTH})
        self.nodes = [self.add(cpus) for _ in range(nodes)]

    @property
    def address(self) -> str:
        return self.cluster.address

    def add(self, cpus: int, env_vars: dict | None = None, resources: dict | None = None):
        """One more worker node: `cpus` job slots, its raylet's (and workers') environment
        overridden by `env_vars`, custom `resources`."""
        node = self.cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1",
                                     **({"env_vars": env_vars} if env_vars else {}),
                                     **({"resources": resources} if resources else {}))
        self.cluster.wait_for_nodes()
        return node

    def kill(self, node) -> None:
        """The node dies as a machine would: its raylet and workers killed, no goodbye."""
        self.cluster.remove_node(node, allow_graceful=False)
        if node in self.nodes:
            self.nodes.remove(node)

    def raylet_pid(self, node) -> int:
        return node.all_processes["raylet"][0].process.pid

    def env(self, base: dict | None = None, **extra) -> dict:
        """An orchestrator's environment: this cluster, loopback only, no LLM or search keys."""
        env = {k: v for k, v in (os.environ if base is None else base).items()
               if not k.startswith(("KERNLOOP_", "TAVILY", "NVIDIA_API", "RAY_ADDRESS"))}
        env.update(LOOPBACK, RAY_ADDRESS=self.address, **extra)
        return env

    def shutdown(self) -> None:
        self.cluster.shutdown()


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def age_s(pid: int) -> float:
    """How long process `pid` has run, in seconds (from /proc); infinity when it is gone."""
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return float("inf")
    return uptime - start / os.sysconf("SC_CLK_TCK")


def judges_under(pid: int) -> list[int]:
    """The judge processes (`python -m checker.check`) running under a node's raylet."""
    out = []
    for c in descendants(pid):
        try:
            cmd = Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"checker.check" in cmd:
            out.append(c)
    return out
