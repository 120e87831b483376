"""The senders' sockets: a reply cut off on its way to a platform dies before its lane can move.

A chat lane's lease (workers/flush.py) lets one worker send a chat's replies, in order. A worker
cut off from the network in the middle of a send keeps that request's bytes in its kernel, which
retransmits them for many minutes; if the network comes back after another worker took the lane
over and sent the same reply and the next ones, the platform would get the old copy late: a
reply twice and out of order. So every sender's connections carry TCP_USER_TIMEOUT: bytes the
platform's host has not acknowledged within `unacked_limit` make the kernel drop the connection
and its unsent data, well before the lane's lease can expire (it is renewed every `renew_every`
and lasts `lane_ttl`). A live platform acknowledges at the TCP level at once, however long its
answer takes, so slow platforms are not cut short.

Bytes the platform did acknowledge before a cut may still be acted on: that reply is sent again
by the next holder (at least once, DESIGN §2.4), in order.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

LANE_TTL = 10.0  # at most; a fleet with shorter session leases uses theirs (lane_ttl)

SocketOption = tuple[int, int, int]


def lane_ttl(lease_seconds: float) -> float:
    """How long a dead holder keeps a lane: LANE_TTL, or the session lease when shorter."""
    return min(LANE_TTL, lease_seconds)


def renew_every(lease_seconds: float) -> float:
    """How often the worker's Renewer extends what it holds (workers/renewer.py)."""
    return min(lease_seconds / 3, 1.0)


def unacked_limit(lease_seconds: float) -> float:
    """How long a send's bytes may go unacknowledged: half of what is left of a lane's lease
    after its last renewal, so the kernel gives up on a cut-off send while the lane is still
    this worker's."""
    ttl = lane_ttl(lease_seconds)
    return max(0.2, (ttl - renew_every(lease_seconds)) / 2)


def socket_options(lease_seconds: float) -> Sequence[SocketOption]:
    """The options every sender's connection is opened with (none where the OS lacks them)."""
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None:  # pragma: no cover - Linux has it; elsewhere the lane's order is weaker
        return ()
    return ((socket.IPPROTO_TCP, option, int(unacked_limit(lease_seconds) * 1000)),)
