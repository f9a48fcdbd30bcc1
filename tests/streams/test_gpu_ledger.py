"""The applier's ledger books GPU pods per card: a card is never over-booked by a binding, a deletion frees
its cards, a pod bound by others is booked on the cards its annotation names; and placement's bindings carry
the cards it chose."""

from __future__ import annotations

import pytest

from policies.framework.profile import ProfileSet, parse_profile
from schemas.events import Binding
from schemas.gpu import GpuCards
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodBound, PodRequest
from streams.core.ledger import Ledger, insufficient
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Shard

# ------------------------------------------------------------------------------------------- builders


def gpu_node(name: str = "n1", cards: int = 2) -> NodeSpec:
    return NodeSpec(
        name=name, allocatable={"cpu": "64", "pods": "110"}, gpus=GpuCards(count=cards, model="T4")
    )


def binding(uid: str, cards: list[int], milli: int, on: str = "n1", attempt: int = 0) -> Binding:
    return Binding(uid=uid, node=on, requests={"cpu": "1"}, gpu_cards=cards, gpu_milli=milli, attempt=attempt)


def ledger_with(*specs: NodeSpec) -> Ledger:
    ledger = Ledger({}, {})
    for spec in specs:
        ledger.upsert_node(spec)
    return ledger


def gpu_bound(uid: str, cards: list[int], milli: int, on: str = "n1") -> PodBound:
    pod = PodRequest(uid=uid, requests={"cpu": "1"}, gpu={"milli": milli})
    return PodBound(uid=uid, node=on, pod=pod, ts=1.0, gpu_cards=cards)


# -------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("case", "first", "second", "status", "reasons"),
    [
        ("two shares that fit one card both commit", ([0], 600), ([0], 400), "applied", []),
        (
            "a share over what is left of its card is refused",
            ([0], 600),
            ([0], 500),
            "conflict",
            [insufficient("gpu-card/0")],
        ),
        ("a share on another card commits", ([0], 600), ([1], 500), "applied", []),
        (
            "a whole card on a shared card is refused",
            ([1], 100),
            ([0, 1], 1000),
            "conflict",
            [insufficient("gpu-card/1")],
        ),
        (
            "a card the node does not have is refused",
            ([0], 100),
            ([5], 100),
            "conflict",
            [insufficient("gpu-card/5")],
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_binding_never_over_books_a_card(case, first, second, status, reasons):
    ledger = ledger_with(gpu_node())
    assert ledger.apply(binding("a", *first), 1.0).status == "applied"
    result = ledger.apply(binding("b", *second), 2.0)
    assert (result.status, result.reasons) == (status, reasons)


def test_a_deleted_pod_frees_its_card_for_the_next_binding():
    ledger = ledger_with(gpu_node())
    assert ledger.apply(binding("a", [0, 1], 1000), 1.0).status == "applied"
    assert ledger.allocated("n1")["gpu-card/0"] == 1000
    assert ledger.apply(binding("b", [0], 100), 2.0).status == "conflict"
    assert ledger.delete("a", 3.0) == "n1"
    assert "gpu-card/0" not in ledger.allocated("n1")
    assert ledger.apply(binding("b", [0], 100, attempt=1), 4.0).status == "applied"


def test_a_recovered_ledger_counts_the_cards_again():
    nodes: dict[str, bytes] = {}
    pods: dict[str, bytes] = {}
    first = Ledger(nodes, pods)
    first.upsert_node(gpu_node())
    first.apply(binding("a", [1], 700), 1.0)
    recovered = Ledger(nodes, pods)
    assert recovered.allocated("n1")["gpu-card/1"] == 700
    assert recovered.apply(binding("b", [1], 400), 2.0).status == "conflict"


def test_a_pod_bound_by_others_is_booked_on_its_cards_and_blocks_bindings_there():
    ledger = ledger_with(gpu_node())
    assert ledger.book(gpu_bound("other", [0], 900), 1.0)
    assert ledger.apply(binding("mine", [0], 200), 2.0).status == "conflict"
    assert ledger.apply(binding("mine", [1], 200), 2.0).status == "applied"


def test_placement_bindings_carry_the_cards_and_the_ledger_books_them():
    profiles = ProfileSet(
        [
            parse_profile(
                {"schedulerName": "gpu", "plugins": {"filter": {"enabled": [{"name": "GpuShareFit"}]}}}
            )
        ]
    )
    shard, ledger = Shard(profiles), Ledger({}, {})
    spec = gpu_node(cards=2)
    ledger.upsert_node(spec)
    script = [Envelope(Kind.NODE, 0.0, NodeEvent(type="upsert", node=spec, ts=0.0))]
    for i, milli in enumerate((700, 700, 300, 1000)):
        gpu = {"milli": milli} if milli < 1000 else {"count": 1}
        pod = PodRequest(uid=f"p{i}", requests={"cpu": "1"}, scheduler_name="gpu", gpu=gpu)
        script.append(Envelope(Kind.POD, 1.0 + i, pod))
    bindings = [output for output in shard.feed_all(script) if isinstance(output, Binding)]
    # Best fit: the third pod (300) fills the first card's 300 left; the whole card finds none untouched.
    assert [(b.uid, b.gpu_cards, b.gpu_milli) for b in bindings] == [
        ("p0", [0], 700),
        ("p1", [1], 700),
        ("p2", [0], 300),
    ]
    assert [ledger.apply(b, 5.0).status for b in bindings] == ["applied"] * 3
    assert ledger.allocated("n1")["gpu-card/0"] == 1000
