"""Test hosts made of Linux network namespaces: each namespace is joined to the root namespace by
a veth pair of its own, on a private /30 of 10.199.0.0/16, and reaches nothing else. Cutting a
host's link (``ip link set <root end> down``) drops its traffic silently, as a partition does.

Everything is removed by :meth:`Hosts.close` (namespaces, links, and the processes left in
them), which is safe after a failed setup."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass

import pytest


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def require_namespaces() -> None:
    """Skip, saying why, where namespaces cannot be made; install iproute2 if ``ip`` lacks."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add): run the suite as root")
    if shutil.which("ip") is None and shutil.which("apt-get") is not None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "iproute2"],
            capture_output=True,
            timeout=300,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if shutil.which("ip") is None:
        pytest.skip(
            "the ip command is missing (Debian package iproute2) and could not be installed"
        )


@dataclass
class Host:
    """One test host: a namespace, the root end of its link, and both addresses."""

    name: str  # a label: "A", "B", ...
    netns: str
    root_if: str  # the veth end in the root namespace
    host_if: str  # the veth end inside the namespace
    root_addr: str  # where the host reaches the store
    host_addr: str

    def exec_argv(self, *argv: str) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def cut(self) -> None:
        """Partition the host: its link goes down, its packets are dropped."""
        ip("link", "set", self.root_if, "down")

    def heal(self) -> None:
        ip("link", "set", self.root_if, "up")


class Hosts:
    """``count`` hosts on 10.199.<n>.0/24, one /30 each (root end .4i+1, host end .4i+2)."""

    def __init__(self, count: int) -> None:
        require_namespaces()
        tag = secrets.token_hex(3)
        used = ip("-o", "addr", "show").stdout
        for _ in range(100):
            octet = secrets.randbelow(250) + 1
            if f"10.199.{octet}." not in used:
                break
        self.subnet = f"10.199.{octet}.0/24"
        self.hosts: list[Host] = []
        try:
            for i in range(count):
                host = Host(
                    name=chr(ord("A") + i),
                    netns=f"jobyard-{tag}-{i}",
                    root_if=f"jy{tag}r{i}",
                    host_if=f"jy{tag}h{i}",
                    root_addr=f"10.199.{octet}.{4 * i + 1}",
                    host_addr=f"10.199.{octet}.{4 * i + 2}",
                )
                made = ip("netns", "add", host.netns, check=False)
                if made.returncode != 0:
                    pytest.skip(f"cannot make a network namespace: ip netns add: {made.stderr}")
                self.hosts.append(host)
                self._setup(host)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _setup(h: Host) -> None:
        ip("link", "add", h.root_if, "type", "veth", "peer", "name", h.host_if)
        ip("link", "set", h.host_if, "netns", h.netns)
        ip("addr", "add", f"{h.root_addr}/30", "dev", h.root_if)
        ip("link", "set", h.root_if, "up")
        ip("-n", h.netns, "addr", "add", f"{h.host_addr}/30", "dev", h.host_if)
        ip("-n", h.netns, "link", "set", h.host_if, "up")
        ip("-n", h.netns, "link", "set", "lo", "up")

    def close(self) -> None:
        for h in self.hosts:
            pids = ip("netns", "pids", h.netns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("link", "del", h.root_if, check=False)  # takes its peer with it
            ip("netns", "del", h.netns, check=False)
        self.hosts = []
