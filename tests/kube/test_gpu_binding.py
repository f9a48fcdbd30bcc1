"""The GPU cards eyrie chose reach the pod on a real API server: the binder sends the
``alibabacloud.com/gpu-index`` annotation with the binding, and the bridge reads it back as the cards a
bound pod holds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from schemas.events import Binding
from schemas.gpu import GPU_INDEX
from streams.kube.api import KubeApi
from streams.kube.binder import Binder
from streams.kube.translate import Occupant, pod_record
from tests.kube.objects import RUN, create, delete, get, pod

pytestmark = pytest.mark.kube

NODE = f"{RUN}-gpu-node"


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=7) as client:
        yield client


@pytest.mark.parametrize(
    ("case", "cards", "annotation"),
    [
        ("a share's one card is written as its index", [1], "1"),
        ("whole cards are written joined by dashes", [0, 2, 3], "0-2-3"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
async def test_the_binding_writes_the_cards_on_the_pod(api, case, cards, annotation):
    created = await create(api, pod("gpu", f"cards-{len(cards)}"))
    try:
        metadata = created["metadata"]
        binding = Binding(
            uid=metadata["uid"],
            namespace=metadata["namespace"],
            name=metadata["name"],
            node=NODE,
            gpu_cards=cards,
            gpu_milli=1000 if len(cards) > 1 else 400,
        )
        answer = await Binder(api).bind(binding)
        assert answer.status == "applied", answer
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{metadata['name']}")
        assert fetched["spec"]["nodeName"] == NODE
        assert fetched["metadata"]["annotations"][GPU_INDEX] == annotation
        record = pod_record(fetched, schedulers={"default"}, now=1.0)
        assert isinstance(record, Occupant) and record.gpu_cards == tuple(cards)
    finally:
        await delete(api, created)


async def test_a_binding_without_cards_writes_no_annotation(api):
    created = await create(api, pod("gpu", "no-cards"))
    try:
        metadata = created["metadata"]
        binding = Binding(uid=metadata["uid"], namespace="default", name=metadata["name"], node=NODE)
        assert (await Binder(api).bind(binding)).status == "applied"
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{metadata['name']}")
        assert GPU_INDEX not in (fetched["metadata"].get("annotations") or {})
    finally:
        await delete(api, created)
