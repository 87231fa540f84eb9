"""Suite-wide guard for ``LIFTBRIDGE_NATS_BACKEND=containers``.

Under the containers backend every test runs its servers in containers, or says why it
cannot (``@pytest.mark.processes_only("why")``, which skips it with that reason). A test
that quietly started a LocalCluster instead would pass on processes unnoticed, so here
that start fails the test with what to do.
"""

from __future__ import annotations

import pytest

from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.testing._backend import CONTAINERS, selected_backend


@pytest.fixture(autouse=True)
def _containers_backend_means_containers(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("processes_only") or selected_backend() != CONTAINERS:
        return

    async def refuse(self: LocalCluster) -> None:
        raise RuntimeError(
            "this test started a LocalCluster under LIFTBRIDGE_NATS_BACKEND=containers: "
            "start it through liftbridge_cluster_factory (containers then), or mark the "
            'test @pytest.mark.processes_only("why it needs processes")'
        )

    monkeypatch.setattr(LocalCluster, "start", refuse)
