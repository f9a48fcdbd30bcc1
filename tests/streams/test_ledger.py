"""The applier's ledger: hard limits, idempotency per uid, deletions, node lifecycle, and the invariant
that no sequence of events makes it book more than a node can hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.events import Binding
from schemas.node import NodeSpec
from schemas.quantity import Resources
from streams.core.ledger import (
    REASON_NODE_NOT_FOUND,
    REASON_POD_DELETED,
    REASON_STALE_ATTEMPT,
    REASON_TOO_MANY_PODS,
    Ledger,
    already_bound,
    bound_node,
    insufficient,
)

GiB = 2**30

# ------------------------------------------------------------------------------------------- builders


def _resources(amounts: dict[str, int]) -> Resources:
    # Keyword arguments cannot hold a slash, so nvidia_com_gpu spells nvidia.com/gpu.
    return Resources({name.replace("nvidia_com_", "nvidia.com/"): v for name, v in amounts.items()})


def node(name: str = "n1", **allocatable: int) -> NodeSpec:
    """A node with allocatable in base units (cpu in millicores)."""
    return NodeSpec(name=name, allocatable=_resources(allocatable))


def small_node(name: str = "n1", unschedulable: bool = False, **overrides: int) -> NodeSpec:
    """4 cores, 8 GiB, 3 pods."""
    allocatable = {"cpu": 4000, "memory": 8 * GiB, "pods": 3} | overrides
    return NodeSpec(name=name, allocatable=_resources(allocatable), unschedulable=unschedulable)


def binding(uid: str = "p1", on: str = "n1", attempt: int = 0, version: int = 0, **requests: int) -> Binding:
    return Binding(
        uid=uid, node=on, requests=_resources(requests), attempt=attempt, node_version=version, cluster="c1"
    )


def fresh() -> tuple[Ledger, dict[str, bytes], dict[str, bytes]]:
    nodes: dict[str, bytes] = {}
    pods: dict[str, bytes] = {}
    return Ledger(nodes, pods), nodes, pods


Step = Callable[[Ledger], object]


def upsert(spec: NodeSpec) -> Step:
    return lambda ledger: ledger.upsert_node(spec)


def bind(b: Binding) -> Step:
    return lambda ledger: ledger.apply(b, 1.0)


def delete(uid: str) -> Step:
    return lambda ledger: ledger.delete(uid, 2.0)


def remove(name: str) -> Step:
    return lambda ledger: ledger.remove_node(name, 3.0)


def cordon(name: str, value: bool = True) -> Step:
    return lambda ledger: ledger.set_cordoned(name, value)


def pod_entry(pods: dict[str, bytes], uid: str) -> dict[str, Any]:
    entry: dict[str, Any] = orjson.loads(pods[uid])
    return entry


def node_entry(nodes: dict[str, bytes], name: str) -> dict[str, Any]:
    entry: dict[str, Any] = orjson.loads(nodes[name])
    return entry


# ---------------------------------------------------------------------------------------------- apply


@pytest.mark.parametrize(
    ("case", "steps", "b", "status", "reasons", "allocated"),
    [
        (
            "a binding that fits is applied and books its requests and one pod",
            [upsert(small_node())],
            binding(cpu=1000, memory=GiB),
            "applied",
            [],
            {"cpu": 1000, "memory": GiB, "pods": 1},
        ),
        (
            "a binding that exactly fills the node is applied",
            [upsert(small_node())],
            binding(cpu=4000, memory=8 * GiB),
            "applied",
            [],
            {"cpu": 4000, "memory": 8 * GiB, "pods": 1},
        ),
        (
            "a binding for a node the ledger does not know conflicts",
            [upsert(small_node())],
            binding(on="n9", cpu=1000, memory=GiB),
            "conflict",
            [REASON_NODE_NOT_FOUND],
            {"pods": 0},
        ),
        (
            "a binding one millicore over the node's cpu conflicts with Insufficient cpu",
            [upsert(small_node()), bind(binding("p0", cpu=3000))],
            binding(cpu=1001),
            "conflict",
            [insufficient("cpu")],
            {"cpu": 3000, "pods": 1},
        ),
        (
            "a binding short of memory and cpu names both, cpu first as kube-scheduler does",
            [upsert(small_node())],
            binding(memory=9 * GiB, cpu=5000),
            "conflict",
            [insufficient("cpu"), insufficient("memory")],
            {"pods": 0},
        ),
        (
            "a positive request of a resource the node does not list does not fit",
            [upsert(small_node())],
            binding(cpu=100, nvidia_com_gpu=1),
            "conflict",
            [insufficient("nvidia.com/gpu")],
            {"pods": 0},
        ),
        (
            "a zero request of a resource the node does not list fits",
            [upsert(small_node())],
            binding(cpu=100, nvidia_com_gpu=0),
            "applied",
            [],
            {"cpu": 100, "pods": 1},
        ),
        (
            "a node holding its maximum of pods conflicts with Too many pods",
            [upsert(small_node(pods=1)), bind(binding("p0", cpu=100))],
            binding(cpu=100),
            "conflict",
            [REASON_TOO_MANY_PODS],
            {"cpu": 100, "pods": 1},
        ),
        (
            "a full pod count is reported before the resources that are short",
            [upsert(small_node(pods=1)), bind(binding("p0", cpu=100))],
            binding(cpu=4000),
            "conflict",
            [REASON_TOO_MANY_PODS, insufficient("cpu")],
            {"cpu": 100, "pods": 1},
        ),
        (
            "a node that lists no pods limit takes pods without counting against one",
            [upsert(node(cpu=1000)), bind(binding("p0")), bind(binding("p2"))],
            binding(cpu=1000),
            "applied",
            [],
            {"cpu": 1000, "pods": 3},
        ),
        (
            "a pods entry in the requests is ignored, since the ledger counts each pod as one",
            [upsert(small_node())],
            binding(cpu=100, pods=5),
            "applied",
            [],
            {"cpu": 100, "pods": 1},
        ),
        (
            "a redelivered binding is applied again without booking twice",
            [upsert(small_node()), bind(binding(cpu=1000, memory=GiB))],
            binding(cpu=1000, memory=GiB),
            "applied",
            [],
            {"cpu": 1000, "memory": GiB, "pods": 1},
        ),
        (
            "a binding for a bound uid to the same node is applied even when the node is now full",
            [upsert(small_node()), bind(binding(cpu=4000))],
            binding(cpu=4000, attempt=1),
            "applied",
            [],
            {"cpu": 4000, "pods": 1},
        ),
        (
            "a binding for a uid bound to another node is rejected naming that node",
            [
                upsert(small_node("n1")),
                upsert(small_node("n2")),
                bind(binding(on="n2", cpu=1000, memory=GiB)),
            ],
            binding(on="n1", attempt=1, cpu=1000, memory=GiB),
            "rejected",
            [already_bound("n2")],
            {"pods": 0},
        ),
        (
            "a binding for a deleted pod is rejected",
            [upsert(small_node()), bind(binding(cpu=1000, memory=GiB)), delete("p1")],
            binding(attempt=1, cpu=1000, memory=GiB),
            "rejected",
            [REASON_POD_DELETED],
            {"pods": 0},
        ),
        (
            "the binding a deleted pod was committed by, redelivered after a crash, gets applied again",
            [upsert(small_node()), bind(binding(cpu=1000, memory=GiB)), delete("p1")],
            binding(cpu=1000, memory=GiB),
            "applied",
            [],
            {"pods": 0},
        ),
        (
            "a binding for a uid deleted before it was ever bound is rejected",
            [upsert(small_node()), delete("p1")],
            binding(cpu=1000, memory=GiB),
            "rejected",
            [REASON_POD_DELETED],
            {"pods": 0},
        ),
        (
            "a lower attempt for a pod released by its node's removal is rejected as stale",
            [upsert(small_node("n2")), bind(binding(on="n2", attempt=2)), remove("n2"), upsert(small_node())],
            binding(attempt=1, cpu=1000, memory=GiB),
            "rejected",
            [REASON_STALE_ATTEMPT],
            {"pods": 0},
        ),
        (
            "the same attempt for a pod released by its node's removal may bind it elsewhere",
            [upsert(small_node("n2")), bind(binding(on="n2", attempt=2)), remove("n2"), upsert(small_node())],
            binding(attempt=2, cpu=1000, memory=GiB),
            "applied",
            [],
            {"cpu": 1000, "memory": GiB, "pods": 1},
        ),
        (
            "a cordoned node still takes a binding that fits, as the pods/binding subresource does",
            [upsert(small_node()), cordon("n1")],
            binding(cpu=1000, memory=GiB),
            "applied",
            [],
            {"cpu": 1000, "memory": GiB, "pods": 1},
        ),
        (
            "a binding's node_version is ignored when the pod fits",
            [upsert(small_node()), bind(binding("p0", cpu=100))],
            binding(version=0, cpu=1000, memory=GiB),
            "applied",
            [],
            {"cpu": 1100, "memory": GiB, "pods": 2},
        ),
        (
            "a binding's node_version never lets a pod past the hard limits",
            [upsert(small_node()), bind(binding("p0", cpu=4000))],
            binding(version=1, cpu=100),
            "conflict",
            [insufficient("cpu")],
            {"cpu": 4000, "pods": 1},
        ),
        (
            "a node whose allocatable shrank below its allocation takes no more of that resource",
            [upsert(small_node()), bind(binding("p0", cpu=3000)), upsert(small_node(cpu=2000))],
            binding(cpu=1),
            "conflict",
            [insufficient("cpu")],
            {"cpu": 3000, "pods": 1},
        ),
        (
            "a node whose cpu shrank below its allocation still takes a pod asking for no cpu",
            [upsert(small_node()), bind(binding("p0", cpu=3000)), upsert(small_node(cpu=2000))],
            binding(memory=GiB),
            "applied",
            [],
            {"cpu": 3000, "memory": GiB, "pods": 2},
        ),
    ],
)
def test_apply_follows_the_ledger_rules(case, steps, b, status, reasons, allocated):
    ledger, nodes, pods = fresh()
    for step in steps:
        step(ledger)
    before = (dict(nodes), dict(pods))
    already_bound_here = b.uid in pods and pod_entry(pods, b.uid)["state"] in ("bound", "deleted")
    result = ledger.apply(b, 5.0)
    assert (result.status, result.reasons) == (status, reasons)
    assert ledger.allocated("n1") == allocated
    if status != "applied" or already_bound_here:
        assert (nodes, pods) == before, "a binding that commits nothing must write nothing"


def test_a_result_answers_its_binding_with_the_time_of_the_verdict():
    ledger, _, _ = fresh()
    ledger.upsert_node(small_node("n1"))
    result = ledger.apply(binding("p7", on="n1", attempt=4, cpu=100), 12.5)
    assert result.model_dump() == {
        "uid": "p7",
        "namespace": None,  # the binding's, which names none
        "name": None,
        "node": "n1",
        "cluster": "c1",
        "status": "applied",
        "reasons": [],
        "at": 12.5,
        "attempt": 4,
    }


def test_a_rejection_for_a_pod_bound_elsewhere_names_the_binding_node_and_the_bound_one_in_the_reason():
    ledger, _, _ = fresh()
    ledger.upsert_node(small_node("n1"))
    ledger.upsert_node(small_node("n2"))
    ledger.apply(binding(on="n2"), 1.0)
    result = ledger.apply(binding(on="n1", attempt=1), 2.0)
    assert (result.node, result.reasons) == ("n1", ["pod already bound to node n2"])
    assert bound_node(result.reasons) == "n2"  # what placement reads back (streams.core.sequencer)


@pytest.mark.parametrize(
    ("case", "reasons", "node"),
    [
        ("the already-bound reason names the node", [already_bound("node-a.b")], "node-a.b"),
        ("other reasons name none", [REASON_POD_DELETED, REASON_STALE_ATTEMPT], None),
        ("no reasons name none", [], None),
    ],
)
def test_bound_node_reads_the_node_out_of_a_rejection(case, reasons, node):
    assert bound_node(reasons) == node


# --------------------------------------------------------------------------------------------- delete


@pytest.mark.parametrize(
    ("case", "steps", "uid", "returned", "allocated", "state"),
    [
        (
            "deleting a bound pod releases its requests and returns its node",
            [upsert(small_node()), bind(binding("p0", cpu=500)), bind(binding(cpu=1000, memory=GiB))],
            "p1",
            "n1",
            {"cpu": 500, "pods": 1},
            "deleted",
        ),
        (
            "deleting a uid the ledger never saw returns None and leaves a tombstone",
            [upsert(small_node())],
            "p1",
            None,
            {"pods": 0},
            "deleted",
        ),
        (
            "deleting a pod twice releases it once",
            [
                upsert(small_node()),
                bind(binding("p0", cpu=500)),
                bind(binding(cpu=1000, memory=GiB)),
                delete("p1"),
            ],
            "p1",
            None,
            {"cpu": 500, "pods": 1},
            "deleted",
        ),
        (
            "deleting a pod its node's removal released returns None and touches no node",
            [upsert(small_node("n2")), bind(binding(on="n2")), remove("n2"), upsert(small_node())],
            "p1",
            None,
            {"pods": 0},
            "deleted",
        ),
        (
            "deleting a pod whose binding conflicted records the tombstone",
            [upsert(small_node()), bind(binding(cpu=9000))],
            "p1",
            None,
            {"pods": 0},
            "deleted",
        ),
    ],
)
def test_delete_releases_a_bound_pod_and_remembers_the_uid(case, steps, uid, returned, allocated, state):
    ledger, _, pods = fresh()
    for step in steps:
        step(ledger)
    assert ledger.delete(uid, 9.0) == returned
    assert ledger.allocated("n1") == allocated
    assert pod_entry(pods, uid)["state"] == state


# ------------------------------------------------------------------------------ forgetting deletions


def deleted_at(ledger: Ledger, times: dict[str, float]) -> None:
    """Pods p1, p2, ... bound on n1 and deleted at the given times (a tombstone when the time is negative:
    the deletion came first)."""
    ledger.upsert_node(node("n1", cpu=10_000))
    for uid, at in times.items():
        if at >= 0:
            ledger.apply(binding(uid, cpu=100), 0.0)
        ledger.delete(uid, abs(at))


@pytest.mark.parametrize(
    ("case", "times", "before", "dropped", "kept"),
    [
        (
            "entries of pods deleted up to the cut are dropped",
            {"p1": 1.0, "p2": 2.0, "p3": 3.0},
            2.0,
            2,
            ["p3"],
        ),
        ("nothing deleted that long ago drops nothing", {"p1": 5.0}, 4.0, 0, ["p1"]),
        ("a tombstone of a deletion that came first is dropped too", {"p1": -1.0, "p2": 9.0}, 1.0, 1, ["p2"]),
    ],
)
def test_forget_deleted_drops_the_entries_of_pods_deleted_long_enough_ago(case, times, before, dropped, kept):
    ledger, _, pods = fresh()
    deleted_at(ledger, times)
    ledger.apply(binding("live", cpu=100), 0.0)
    assert ledger.forget_deleted(before) == dropped
    assert sorted(pods) == sorted([*kept, "live"])
    assert ledger.allocated("n1") == {"cpu": 100, "pods": 1}


def test_a_recovered_ledger_forgets_deletions_it_did_not_see():
    ledger, nodes, pods = fresh()
    deleted_at(ledger, {"p2": 2.0, "p1": 1.0, "p3": 3.0})
    recovered = Ledger(dict(nodes), dict(pods))  # built from the entries alone, as after a restart
    assert recovered.forget_deleted(2.5) == 2
    assert recovered.forget_deleted(10.0) == 1


def test_a_binding_for_a_forgotten_deleted_pod_is_booked_as_a_new_pod():
    ledger, _, _ = fresh()
    deleted_at(ledger, {"p1": 1.0})
    later = binding("p1", attempt=1, cpu=100)  # not the binding committed before the deletion
    assert ledger.apply(later, 1.5).status == "rejected"
    ledger.forget_deleted(1.0)
    assert ledger.apply(later, 2.0).status == "applied"


# ------------------------------------------------------------------------------------ node lifecycle


def test_removing_a_node_releases_exactly_its_bound_pods_in_uid_order():
    ledger, _, pods = fresh()
    for name in ("n1", "n10"):
        ledger.upsert_node(node(name, cpu=10_000))
    for uid, on in (("c", "n1"), ("a", "n1"), ("b", "n10"), ("d", "n1")):
        ledger.apply(binding(uid, on=on, cpu=100), 1.0)
    ledger.delete("d", 2.0)
    assert ledger.remove_node("n1", 3.0) == ["a", "c"]
    assert ledger.node_names() == ["n10"]
    assert [pod_entry(pods, uid)["state"] for uid in "abcd"] == ["released", "bound", "released", "deleted"]
    assert pod_entry(pods, "a")["at"] == 3.0
    assert ledger.allocated("n10") == {"cpu": 100, "pods": 1}


def test_removing_an_unknown_node_releases_nothing():
    ledger, _, _ = fresh()
    assert ledger.remove_node("ghost", 1.0) == []


def test_a_node_added_again_after_removal_starts_empty():
    ledger, _, _ = fresh()
    ledger.upsert_node(small_node())
    ledger.apply(binding(cpu=1000), 1.0)
    ledger.remove_node("n1", 2.0)
    ledger.upsert_node(small_node())
    assert ledger.allocated("n1") == {"pods": 0}


def test_an_upsert_replaces_allocatable_and_cordon_but_keeps_the_allocation():
    ledger, nodes, _ = fresh()
    ledger.upsert_node(small_node())
    ledger.apply(binding(cpu=1000), 1.0)
    ledger.upsert_node(small_node(cpu=500, unschedulable=True))
    assert node_entry(nodes, "n1") == {
        "allocatable": {"cpu": 500, "memory": 8 * GiB, "pods": 3},
        "cordoned": True,
    }
    assert ledger.allocated("n1") == {"cpu": 1000, "pods": 1}


def test_a_commit_and_a_release_each_write_only_the_pod_entry():
    ledger, nodes, pods = fresh()
    ledger.upsert_node(small_node())
    node_before = nodes["n1"]
    writes: list[str] = []

    class Recording(dict[str, bytes]):
        def __setitem__(self, key: str, value: bytes) -> None:
            writes.append(key)
            super().__setitem__(key, value)

    recording_nodes, recording_pods = Recording(nodes), Recording(pods)
    ledger = Ledger(recording_nodes, recording_pods)
    ledger.apply(binding("p1", cpu=1000), 1.0)
    ledger.delete("p1", 2.0)
    assert writes == ["p1", "p1"]
    assert recording_nodes["n1"] == node_before


@pytest.mark.parametrize(
    ("case", "steps", "cordoned"),
    [
        ("a cordon is recorded", [cordon("n1")], True),
        ("an uncordon clears it", [cordon("n1"), cordon("n1", False)], False),
        ("an upsert of an unschedulable spec cordons", [upsert(small_node(unschedulable=True))], True),
        ("an upsert of a schedulable spec uncordons", [cordon("n1"), upsert(small_node())], False),
        ("a cordon of an unknown node is ignored", [cordon("n9")], False),
    ],
)
def test_the_cordon_flag_follows_cordon_events_and_specs(case, steps, cordoned):
    ledger, nodes, _ = fresh()
    ledger.upsert_node(small_node())
    for step in steps:
        step(ledger)
    assert node_entry(nodes, "n1")["cordoned"] is cordoned
    assert ledger.node_names() == ["n1"]


def test_node_names_are_sorted_and_an_unknown_node_has_no_allocation():
    ledger, _, _ = fresh()
    for name in ("b", "c", "a"):
        ledger.upsert_node(node(name))
    assert ledger.node_names() == ["a", "b", "c"]
    assert ledger.allocated("zz") == {}


def test_a_ledger_rebuilt_on_the_same_mappings_after_a_restart_does_not_book_a_redelivery_twice():
    _, nodes, pods = fresh()
    first = Ledger(nodes, pods)
    first.upsert_node(small_node())
    first.apply(binding(cpu=1000), 1.0)
    restarted = Ledger(nodes, pods)
    assert restarted.apply(binding(cpu=1000), 2.0).status == "applied"
    assert restarted.allocated("n1") == {"cpu": 1000, "pods": 1}


def test_recount_sums_the_pod_entries_filled_behind_the_ledgers_back():
    # A Faust table is filled by its changelog on recovery, after the ledger was built over it.
    _, nodes, pods = fresh()
    first = Ledger(nodes, pods)
    first.upsert_node(small_node())
    first.apply(binding("p0", cpu=1000), 1.0)
    first.apply(binding("p1", cpu=500), 1.0)
    first.delete("p0", 2.0)
    recovered_nodes, recovered_pods = {}, {}
    restarted = Ledger(recovered_nodes, recovered_pods)
    recovered_nodes.update(nodes)
    recovered_pods.update(pods)
    assert restarted.allocated("n1") == {"pods": 0}
    assert restarted.recount() == 1
    assert restarted.allocated("n1") == {"cpu": 500, "pods": 1}
    assert restarted.apply(binding("p1", cpu=500), 3.0).status == "applied"  # the binding, redelivered
    assert restarted.allocated("n1") == {"cpu": 500, "pods": 1}


def test_a_pod_entry_records_what_was_booked():
    ledger, _, pods = fresh()
    ledger.upsert_node(small_node())
    ledger.apply(binding(attempt=3, cpu=250, memory=0), 4.5)
    assert pod_entry(pods, "p1") == {
        "node": "n1",
        "requests": {"cpu": 250},
        "attempt": 3,
        "state": "bound",
        "at": 4.5,
    }


# ------------------------------------------------------------------------------------------ property

NODE_NAMES = ("a", "b", "c")
UIDS = tuple(f"p{i}" for i in range(8))
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")

amounts = st.integers(min_value=0, max_value=6)
allocatables = st.dictionaries(st.sampled_from((*RESOURCES, "pods")), amounts, max_size=4)
requests = st.dictionaries(st.sampled_from(RESOURCES), amounts, max_size=3)


def operations(fixed_specs: bool) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Every node is added first, so that most bindings meet a node; bindings are the most frequent step."""
    specs = st.just({}) if fixed_specs else allocatables
    upserts = [st.tuples(st.just("upsert"), st.just(name), specs) for name in NODE_NAMES]
    bind = st.tuples(
        st.just("bind"),
        st.sampled_from(UIDS),
        st.sampled_from((*NODE_NAMES, "ghost")),
        requests,
        st.integers(min_value=0, max_value=3),
    )
    steps = st.lists(
        st.one_of(
            bind,
            bind,
            bind,
            bind,
            st.tuples(st.just("upsert"), st.sampled_from(NODE_NAMES), specs),
            st.tuples(st.just("delete"), st.sampled_from(UIDS)),
            st.tuples(st.just("remove"), st.sampled_from(NODE_NAMES)),
            st.tuples(st.just("cordon"), st.sampled_from(NODE_NAMES), st.booleans()),
        ),
        min_size=10,
        max_size=80,
    )
    return st.builds(lambda first, rest: [*first, *rest], st.tuples(*upserts), steps)


FIXED = {"a": {"cpu": 6, "memory": 6, "pods": 2}, "b": {"cpu": 3, "nvidia.com/gpu": 2}, "c": {"memory": 5}}


class Model:
    """What the results say is booked where, kept apart from the ledger's own pod entries."""

    def __init__(self) -> None:
        self.bound: dict[str, tuple[str, dict[str, int]]] = {}
        self.deleted: set[str] = set()
        self.committed: dict[str, tuple[str, int]] = {}
        """Per uid, the node and attempt of its latest booking."""
        # Amounts over allocatable that a shrinking upsert left in place; they may only go down.
        self.grandfathered: dict[str, dict[str, int]] = {}


def run_step(ledger: Ledger, model: Model, op: tuple[Any, ...], fixed_specs: bool) -> None:
    kind = op[0]
    if kind == "upsert":
        allocatable = FIXED[op[1]] if fixed_specs else op[2]
        ledger.upsert_node(NodeSpec(name=op[1], allocatable=Resources(allocatable)))
        if not fixed_specs:
            over = {r: n for r, n in ledger.allocated(op[1]).items() if n > _limit(allocatable, r)}
            model.grandfathered[op[1]] = over
    elif kind == "bind":
        _, uid, on, asked, attempt = op
        result = ledger.apply(Binding(uid=uid, node=on, requests=Resources(asked), attempt=attempt), 1.0)
        if result.status == "applied" and uid in model.deleted:
            # Only the binding that committed it before its deletion is answered so again (a redelivery);
            # nothing is booked, which check_invariants confirms.
            assert model.committed.get(uid) == (on, attempt)
        elif result.status == "applied":
            if uid not in model.bound:  # a new booking, not the same one answered again
                model.committed[uid] = (on, attempt)
            booked = {r: n for r, n in asked.items() if n > 0}
            assert model.bound.setdefault(uid, (on, booked))[0] == on, "a uid was booked on two nodes"
    elif kind == "delete":
        released = ledger.delete(op[1], 2.0)
        assert released == (model.bound.pop(op[1])[0] if op[1] in model.bound else None)
        model.deleted.add(op[1])
    elif kind == "remove":
        freed = ledger.remove_node(op[1], 3.0)
        assert freed == sorted(uid for uid, (on, _) in model.bound.items() if on == op[1])
        for uid in freed:
            del model.bound[uid]
        model.grandfathered.pop(op[1], None)
    else:
        ledger.set_cordoned(op[1], op[2])


def _limit(allocatable: dict[str, int], resource: str) -> float:
    if resource == "pods":
        return allocatable.get("pods", float("inf"))
    return allocatable.get(resource, 0)


def check_invariants(ledger: Ledger, model: Model, nodes: dict[str, bytes], pods: dict[str, bytes]) -> None:
    entries = {uid: orjson.loads(raw) for uid, raw in pods.items()}
    for name, raw in nodes.items():
        entry = orjson.loads(raw)
        allocated = ledger.allocated(name)
        over = model.grandfathered.setdefault(name, {})
        for resource, amount in allocated.items():
            if amount <= _limit(entry["allocatable"], resource):
                over.pop(resource, None)
                continue
            assert amount <= over.get(resource, -1), f"{name} booked {resource} past allocatable"
            over[resource] = amount

        expected: dict[str, int] = {"pods": 0}
        from_entries: dict[str, int] = {"pods": 0}
        for on, booked in model.bound.values():
            if on == name:
                expected["pods"] += 1
                for resource, amount in booked.items():
                    expected[resource] = expected.get(resource, 0) + amount
        for pod in entries.values():
            if pod["state"] == "bound" and pod["node"] == name:
                from_entries["pods"] += 1
                for resource, amount in pod["requests"].items():
                    from_entries[resource] = from_entries.get(resource, 0) + amount
        assert allocated == expected == from_entries
    bound = {uid for uid, pod in entries.items() if pod["state"] == "bound"}
    assert bound == set(model.bound)
    assert all(entries[uid]["node"] in nodes for uid in bound)
    assert model.deleted <= {uid for uid, pod in entries.items() if pod["state"] == "deleted"}


@pytest.mark.parametrize(
    ("case", "fixed_specs"),
    [
        ("with each node's allocatable fixed, no node is ever booked past it", True),
        ("with allocatable changing at random, nothing over it ever grows", False),
    ],
)
def test_no_sequence_of_events_books_a_node_past_its_allocatable(case, fixed_specs):
    @settings(max_examples=250, deadline=None)
    @given(ops=operations(fixed_specs))
    def check(ops: list[tuple[Any, ...]]) -> None:
        ledger, nodes, pods = fresh()
        model = Model()
        for op in ops:
            run_step(ledger, model, op, fixed_specs)
            check_invariants(ledger, model, nodes, pods)
            if fixed_specs:
                assert not any(model.grandfathered.values())

    check()
