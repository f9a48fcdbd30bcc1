"""A gated pod through a shard: held, replaced by the version that lifts its gates, then placed; offline
replay of the same envelopes decides the same."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.events import Binding
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Shard

# ------------------------------------------------------------------------------------------- builders


def node(name: str) -> Envelope:
    room = {"cpu": "4", "memory": "8Gi", "pods": 110}
    event = NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=room, allocatable=room))
    return Envelope(Kind.NODE, 1.0, event, "node-events/0")


def pod(uid: str, *gates: str, ts: float = 10.0) -> Envelope:
    request = PodRequest(uid=uid, requests={"cpu": "1"}, scheduling_gates=list(gates))
    return Envelope(Kind.POD, ts, request, "pod-requests/0")


def deleted(uid: str, ts: float) -> Envelope:
    return Envelope(Kind.DELETE, ts, PodDeleted(uid=uid, ts=ts), "pod-requests/0")


def bindings(outputs: list[Any]) -> list[str]:
    return [output.uid for output in outputs if isinstance(output, Binding)]


@pytest.mark.parametrize(
    ("envelopes", "bound"),
    [
        pytest.param([pod("p", "a")], [], id="a gated pod is held without a binding"),
        pytest.param(
            [pod("p", "a", "b"), pod("p", "b", ts=11.0), pod("p", ts=12.0)],
            ["p"],
            id="the version that lifts the last gate is placed",
        ),
        pytest.param(
            [pod("p", "a"), deleted("p", 11.0), pod("p", ts=12.0)],
            ["p"],
            id="a gated pod deleted and created again without gates is placed",
        ),
        pytest.param(
            [pod("p"), pod("p", "a", ts=11.0)],
            ["p"],
            id="a placed pod is not taken back by a later version with a gate",
        ),
    ],
)
def test_gated_pods_through_a_shard(envelopes: list[Envelope], bound: list[str]) -> None:
    shard = Shard()
    outputs = [output for envelope in [node("n1"), *envelopes] for output in shard.feed(envelope)]
    assert bindings(outputs) == bound
