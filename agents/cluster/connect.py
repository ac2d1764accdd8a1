"""Joining a Ray cluster (``--ray ADDRESS``), refused in one line before any work.

``auto`` follows Ray's own convention: the ``RAY_ADDRESS`` environment variable. Ray is an
optional extra (``pip install -e '.[ray]'``) and is imported here only, when a command is given
``--ray``. What can go wrong is said naming the flag: Ray missing, nothing listening at the
address (a TCP probe first: Ray itself would keep retrying for a minute), a cluster of another
Ray or Python version (Ray's own check, its first line kept).

Ray replaces a driver's ``127.0.0.1`` by the machine's routable address; a cluster on another
loopback address (127.0.0.2, as the tests start one) keeps its own when the driver names it
(``_node_ip_address``), so nothing leaves the loopback.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

RAY_INSTALL = "pip install -e '.[ray]'"
PROBE_TIMEOUT_S = 5.0


class ClusterError(ValueError):
    """A cluster that cannot be used; the message is one line naming --ray."""


def resolve_address(address: str) -> str:
    """``address``, or for ``auto`` the one ``RAY_ADDRESS`` names."""
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS", "").strip()
        if not found:
            raise ClusterError(
                "--ray auto: RAY_ADDRESS is not set; give the cluster's address, HOST:PORT of "
                "its head node (what `ray start --head` prints)"
            )
        address = found
    host, port = _host_port(address)
    return f"{host}:{port}"


def _host_port(address: str) -> tuple[str, int]:
    text = address.removeprefix("ray://")
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"--ray {address}: expected HOST:PORT of the head node, or auto")
    return host.strip("[]"), int(port)


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
        raise ClusterError(f"--ray {address}: Ray is not installed; {RAY_INSTALL}") from None
    if ray.is_initialized():
        return ray
    host, port = _host_port(resolved)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise ClusterError(
            f"--ray {resolved}: no Ray cluster answers there ({e.strerror or e}); start one "
            "with `ray start --head` or give its address"
        ) from None
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if _loopback(host):  # keep the driver on the cluster's loopback address
        options["_node_ip_address"] = host
    try:
        ray.init(address=resolved, **options)
    except Exception as e:  # Ray's own: version mismatch, a port that is no Ray head
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ClusterError(f"--ray {resolved}: {first}") from None
    return ray
