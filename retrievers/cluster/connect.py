"""Joining a Ray cluster (``--ray ADDRESS``), refused in one line before any work.

``auto`` follows Ray's own convention: the ``RAY_ADDRESS`` environment variable. HOST:PORT is a
head node's address (what ``ray start --head`` prints); ``ray://HOST:PORT`` goes through Ray
Client, as ``ray.init`` takes it. Ray is an optional extra (``pip install -e '.[ray]'``) and is
imported here only, when a command is given ``--ray``. What can go wrong is said naming the
flag: Ray missing, nothing listening at the address (a TCP probe first: Ray itself would keep
retrying for a minute), a cluster of another Ray or Python version (Ray's own check, its
message joined onto one line). An address is shown with any credentials in it masked
(`eval.plumbing.secrets.credentials`).

Ray replaces a driver's ``127.0.0.1`` by the machine's routable address; a cluster on another
loopback address (127.0.0.2, as the tests start one) keeps its own when the driver names it
(``_node_ip_address``), so nothing leaves the loopback.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from typing import Any

from eval.plumbing.secrets.credentials import mask_urls, public_url

RAY_INSTALL = "pip install -e '.[ray]'"
PROBE_TIMEOUT_S = 5.0
MAX_SHOWN = 400  # characters of a Ray message a refusal shows


def add_ray_flag(parser: argparse.ArgumentParser, does: str) -> None:
    """``--ray ADDRESS`` on a command line; ``does`` says what the cluster does there."""
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help=f"{does} on the Ray cluster at ADDRESS: HOST:PORT of its head node, "
        "ray://HOST:PORT (Ray Client), or auto (RAY_ADDRESS); docs/cluster.md",
    )


class ClusterError(ValueError):
    """A cluster that cannot be used; the message is one line naming --ray."""


def resolve_address(address: str) -> str:
    """``address``, or for ``auto`` the one ``RAY_ADDRESS`` names; ``ray://`` kept."""
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS", "").strip()
        if not found:
            raise ClusterError(
                "--ray auto: RAY_ADDRESS is not set; give the cluster's address, HOST:PORT of "
                "its head node (what `ray start --head` prints)"
            )
        address = found
    _host_port(address)
    return address.strip()


def shown(address: str) -> str:
    """``address`` as a line may show it: credentials masked, with or without a scheme."""
    if "://" in address:
        return public_url(address) or address
    return (public_url(f"ray://{address}") or address).removeprefix("ray://")


def _host_port(address: str) -> tuple[str, int]:
    # ray://user:token@host:port: the host and port after any userinfo
    text = address.strip().removeprefix("ray://").rpartition("@")[2]
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(
            f"--ray {shown(address)}: expected HOST:PORT of the head node, ray://HOST:PORT, or auto"
        )
    return host.strip("[]"), int(port)


def one_line(error: BaseException) -> str:
    """Ray's message on one line (its version check spreads one over six), URLs masked."""
    text = " ".join(str(error).split()) or type(error).__name__
    return mask_urls(text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "...")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def connect(address: str) -> Any:
    """The ``ray`` module, joined to the cluster at ``address`` (once per process)."""
    resolved = resolve_address(address)
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray {shown(address)}: Ray is not installed; {RAY_INSTALL}") from None
    if ray.is_initialized():
        return ray
    host, port = _host_port(resolved)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise ClusterError(
            f"--ray {shown(resolved)}: no Ray cluster answers there ({e.strerror or e}); start one "
            "with `ray start --head` or give its address"
        ) from None
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if _loopback(host):  # keep the driver on the cluster's loopback address
        options["_node_ip_address"] = host
    try:
        ray.init(address=resolved, **options)
    except Exception as e:  # Ray's own: version mismatch, a port that is no Ray head
        raise ClusterError(f"--ray {shown(resolved)}: {one_line(e)}") from None
    return ray
