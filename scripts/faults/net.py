"""The run's network: hosts as Linux network namespaces, a bridge, and partitions.

What it owns: every namespace of one run (names ``icf<pid>-<host>``, unique per run),
the bridge namespace ``icf<pid>-sw`` that joins them (never the root namespace: the run
touches no interface of the machine), one veth pair per host (its ``eth0`` in the host,
its peer on the bridge), and the ``nft`` tables that cut hosts apart.

Invariants:

- Every host has ``lo`` up and one private address ``10.199.0.N/24``; the subnet exists
  only on this run's bridge, so runs side by side do not see each other.
- A partition is one ``nft`` table per affected host, dropping (never rejecting)
  packets both ways; healing deletes the table. Nothing else is changed on a host.
- :meth:`Network.close` deletes every namespace this run made (which deletes its veths
  and tables); it is safe to call twice, and :func:`open_network` calls it on every
  exit, Ctrl-C and exception included.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

SUBNET = "10.199.0"


class NetworkError(RuntimeError):
    """A namespace, link or rule could not be made; the text says which command failed."""


def run(*command: str, stdin: str | None = None) -> str:
    """Run ``command``; its stdout. Raises NetworkError when it fails."""
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def require_tools() -> None:
    """Raises NetworkError naming what is missing: root, ``ip`` or ``nft``."""
    if os.geteuid() != 0:
        raise NetworkError("the fault harness makes network namespaces: it must run as root")
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            raise NetworkError(f"'{tool}' is missing: apt-get install {package}")


@dataclass
class Host:
    name: str        # short: "pg", "b1", "c1"
    netns: str       # the namespace
    address: str     # 10.199.0.N

    def prefix(self) -> list[str]:
        """The command prefix that runs a program on this host."""
        return ["ip", "netns", "exec", self.netns]


@dataclass
class Network:
    prefix: str
    hosts: dict[str, Host] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)      # namespaces, in creation order
    cuts: dict[str, set[str]] = field(default_factory=dict)   # host -> addresses it is cut from

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def open(self) -> None:
        """Make the bridge's namespace and its bridge."""
        self._netns(self.switch)
        self._in(self.switch, "ip", "link", "set", "lo", "up")
        self._in(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self._in(self.switch, "ip", "link", "set", "br0", "up")

    def add_host(self, name: str) -> Host:
        """A namespace joined to the bridge, with ``lo`` up and the next address."""
        number = len(self.hosts) + 2
        host = Host(name, f"{self.prefix}-{name}", f"{SUBNET}.{number}")
        self._netns(host.netns)
        run("ip", "link", "add", "eth0", "netns", host.netns, "type", "veth",
            "peer", "name", f"v{name}", "netns", self.switch)
        self._in(self.switch, "ip", "link", "set", f"v{name}", "master", "br0")
        self._in(self.switch, "ip", "link", "set", f"v{name}", "up")
        self._in(host.netns, "ip", "link", "set", "lo", "up")
        self._in(host.netns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        self._in(host.netns, "ip", "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    # -- partitions --------------------------------------------------------------------

    def cut(self, host: str, others: list[str]) -> None:
        """Drop every packet between ``host`` and ``others`` (host names), both ways,
        with a table in ``host``'s namespace (added to any cut it has already)."""
        addresses = self.cuts.setdefault(host, set())
        addresses.update(self.hosts[o].address for o in others)
        self._drop_table(host)
        listed = ", ".join(sorted(addresses))
        rules = (f"table inet icf_cut {{\n"
                 f"  chain inbound {{ type filter hook input priority -10; policy accept;\n"
                 f"    ip saddr {{ {listed} }} drop\n  }}\n"
                 f"  chain outbound {{ type filter hook output priority -10; policy accept;\n"
                 f"    ip daddr {{ {listed} }} drop\n  }}\n"
                 f"}}\n")
        run(*self.hosts[host].prefix(), "nft", "-f", "-", stdin=rules)

    def heal(self, host: str | None = None) -> None:
        """Delete the cut table of ``host`` (of every host when None)."""
        for name in [host] if host else list(self.cuts):
            self.cuts.pop(name, None)
            self._drop_table(name)

    def _drop_table(self, host: str) -> None:
        listed = subprocess.run([*self.hosts[host].prefix(), "nft", "list", "tables"],
                                capture_output=True, text=True, timeout=30).stdout
        if "icf_cut" in listed:
            run(*self.hosts[host].prefix(), "nft", "delete", "table", "inet", "icf_cut")

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> None:
        """Delete every namespace this run made (the bridge's last); idempotent."""
        for netns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
        self.made.clear()
        self.hosts.clear()

    def _netns(self, netns: str) -> None:
        run("ip", "netns", "add", netns)
        self.made.append(netns)

    @staticmethod
    def _in(netns: str, *command: str) -> str:
        return run("ip", "netns", "exec", netns, *command)


@contextmanager
def open_network(hosts: list[str], prefix: str | None = None) -> Iterator[Network]:
    """A network of ``hosts`` (names), deleted on every way out of the block and, should
    the block never end (a signal that kills the interpreter), at exit.
    Raises NetworkError."""
    require_tools()
    network = Network(prefix or f"icf{os.getpid()}")
    atexit.register(network.close)
    try:
        network.open()
        for name in hosts:
            network.add_host(name)
        yield network
    finally:
        network.close()
        atexit.unregister(network.close)
