"""A consumer group member's side of Liftbridge's group protocol (beta in v1.9.0).

A member joins the group for some streams; the group's coordinator broker assigns
partitions. Fetching assignments from the coordinator is also the member's heartbeat;
it must carry the group's current epoch, so a rebalance shows up as an epoch error,
after which the member reads the new epoch and coordinator from the metadata. A
member that cannot reach the coordinator for the coordinator timeout reports it, and
the cluster picks a new one once most members did. This module makes those calls and
keeps that state; what to read is the consumer's business (:mod:`._consumer`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._errors import LiftbridgeError, RpcError
from ._log import get_logger
from ._proto import api_pb2

if TYPE_CHECKING:
    from ._read_transport import GroupRoutes
    from ._router import Stub

__all__ = ["Membership"]

_log = get_logger("groups")


class Membership:
    """One member of one group: join, heartbeat (fetch assignments), leave."""

    def __init__(
        self,
        router: GroupRoutes,
        group_id: str,
        consumer_id: str,
        streams: Sequence[str],
        *,
        assignment_interval: float | None,
    ) -> None:
        self._router = router
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.streams = tuple(streams)
        self._assignment_interval = assignment_interval
        self.joined = False
        self.coordinator = ""
        self.epoch = 0
        self.consumer_timeout = 15.0
        self.coordinator_timeout = 15.0
        self.last_contact = time.monotonic()

    def interval(self) -> float:
        """Seconds between heartbeats (40% of the server's consumer timeout by default)."""
        if self._assignment_interval is not None:
            return self._assignment_interval
        return max(0.1, 0.4 * self.consumer_timeout)

    async def join(self) -> None:
        """Join the group (again)."""
        req = api_pb2.JoinConsumerGroupRequest(
            groupId=self.group_id, consumerId=self.consumer_id, streams=list(self.streams)
        )

        async def call(stub: Stub, left: float) -> api_pb2.JoinConsumerGroupResponse:
            return await stub.JoinConsumerGroup(req, timeout=left)

        resp = await self._router.call_any(f"join consumer group {self.group_id!r}", call)
        self.coordinator = resp.coordinator
        self.epoch = resp.epoch
        self.consumer_timeout = resp.consumerTimeout / 1e9
        self.coordinator_timeout = resp.coordinatorTimeout / 1e9
        self.last_contact = time.monotonic()
        self.joined = True
        _log.debug(
            "group %r member %s joined: coordinator %s, epoch %d",
            self.group_id,
            self.consumer_id,
            self.coordinator,
            self.epoch,
        )

    async def leave(self) -> None:
        """Leave the group."""
        req = api_pb2.LeaveConsumerGroupRequest(groupId=self.group_id, consumerId=self.consumer_id)

        async def call(stub: Stub, left: float) -> None:
            await stub.LeaveConsumerGroup(req, timeout=left)

        self.joined = False
        await self._router.call_any(f"leave consumer group {self.group_id!r}", call)

    async def fetch_assignments(self) -> tuple[set[tuple[str, int]], int]:
        """The partitions the coordinator assigns this member now, and the epoch."""
        req = api_pb2.FetchConsumerGroupAssignmentsRequest(
            groupId=self.group_id, consumerId=self.consumer_id, epoch=self.epoch
        )

        async def call(stub: Stub, left: float) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
            return await stub.FetchConsumerGroupAssignments(req, timeout=left)

        resp = await self._router.call_broker(
            f"fetch assignments of group {self.group_id!r}",
            self.coordinator,
            call,
            timeout=max(1.0, self.consumer_timeout / 2),
        )
        self.last_contact = time.monotonic()
        return {(a.stream, p) for a in resp.assignments for p in a.partitions}, resp.epoch

    @staticmethod
    def evicted(exc: LiftbridgeError) -> bool:
        """Whether a failed heartbeat means this member is no longer in the group."""
        return (isinstance(exc, RpcError) and exc.code == "NOT_FOUND") or (
            "not a member" in str(exc).lower()
        )

    async def follow_metadata(self) -> bool:
        """Read the group's coordinator and epoch from the metadata; True if they moved."""
        try:
            md = await self._router.fetch_metadata([], [self.group_id])
        except LiftbridgeError:
            return False
        group = md.groups.get(self.group_id)
        if group is None or (group.coordinator, group.epoch) == (self.coordinator, self.epoch):
            return False
        self.coordinator, self.epoch = group.coordinator, group.epoch
        return True

    async def report_if_silent(self) -> None:
        """Report the coordinator once it has not answered for the coordinator timeout."""
        silent = time.monotonic() - self.last_contact
        if silent <= self.coordinator_timeout:
            return
        _log.warning(
            "group %r: coordinator %s has not answered for %.0f s; reporting it",
            self.group_id,
            self.coordinator,
            silent,
        )
        req = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self.group_id,
            consumerId=self.consumer_id,
            coordinator=self.coordinator,
            epoch=self.epoch,
        )

        async def call(stub: Stub, left: float) -> None:
            await stub.ReportConsumerGroupCoordinator(req, timeout=left)

        with contextlib.suppress(LiftbridgeError):
            await self._router.call_any(f"report coordinator of {self.group_id!r}", call)
