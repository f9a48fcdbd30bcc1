"""The snapshot's derived tables stay in step with the tables they are derived from."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.snapshot import CPU_MEMORY_ROWS, Snapshot
from schemas.node import NodeSpec
from tests.policies.builders import pod

NODES = [f"n{i}" for i in range(6)]


TAINTS = [
    {"key": key, "value": value, "effect": effect}
    for key in ("gpu", "spot")
    for value in ("a", "b")
    for effect in ("NoSchedule", "PreferNoSchedule")
]


def spec(name: str, cpu: int, memory: int, taints: tuple[int, ...] = ()) -> NodeSpec:
    return NodeSpec.model_validate(
        {
            "name": name,
            "capacity": {"cpu": f"{cpu}m", "memory": memory},
            "taints": [TAINTS[i] for i in sorted(set(taints))],
        }
    )


def derived_cpu_memory(snapshot: Snapshot) -> np.ndarray:
    """`Snapshot.cpu_memory` as its docstring defines it, from the integer tables."""
    cpu, memory = snapshot.column["cpu"], snapshot.column["memory"]
    return np.stack(
        [
            snapshot.allocatable[:, cpu],
            snapshot.allocatable[:, memory],
            snapshot.nonzero[:, 0],
            snapshot.nonzero[:, 1],
            snapshot.requested[:, cpu],
            snapshot.requested[:, memory],
        ]
    ).astype(np.float64)


_operation = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.sampled_from(NODES),
        st.integers(0, 64_000),
        st.integers(0, 2**40),
        st.lists(st.integers(0, len(TAINTS) - 1), max_size=3),
    ),
    st.tuples(st.just("remove"), st.sampled_from(NODES)),
    st.tuples(
        st.just("assume"),
        st.sampled_from(NODES),
        st.integers(0, 8_000) | st.none(),
        st.integers(0, 2**34) | st.none(),
    ),
    st.tuples(st.just("forget"), st.integers(0, 40)),
    st.tuples(st.just("totals"), st.sampled_from(NODES), st.integers(0, 4_000), st.integers(0, 2**33)),
)


@settings(max_examples=80, deadline=None)
@given(operations=st.lists(_operation, max_size=40))
def test_the_float_cpu_and_memory_rows_equal_the_integer_tables_after_any_changes(operations):
    snapshot = Snapshot()
    placed: list[str] = []
    for number, operation in enumerate(operations):
        kind, *args = operation
        if kind == "upsert":
            name, cpu, memory, taints = args
            snapshot.upsert_node(spec(name, cpu, memory, tuple(taints)))
        elif kind == "remove":
            snapshot.remove_node(args[0])
        elif kind == "assume" and args[0] in snapshot.index:
            name, cpu, memory = args
            request = pod(f"p{number}", cpu=None if cpu is None else f"{cpu}m", memory=memory)
            snapshot.assume(snapshot.pod_info(request), snapshot.index[name])
            placed.append(request.uid)
        elif kind == "forget" and placed:
            snapshot.forget(placed.pop(args[0] % len(placed)))
        elif kind == "totals" and args[0] in snapshot.index:
            name, cpu, memory = args
            snapshot.add_usage(snapshot.index[name], {"cpu": cpu, "memory": memory}, 1)
        assert snapshot.cpu_memory.shape[0] == len(CPU_MEMORY_ROWS)
        assert np.array_equal(snapshot.cpu_memory, derived_cpu_memory(snapshot))


def counted_taints(snapshot: Snapshot, masks: list[int]) -> np.ndarray:
    return sum(
        (
            np.bitwise_count(word & np.uint64(mask)).astype(np.int64)
            for word, mask in zip(snapshot.taint_words, masks, strict=True)
        ),
        np.zeros(len(snapshot.live), dtype=np.int64),
    )


@settings(max_examples=80, deadline=None)
@given(
    operations=st.lists(
        st.tuples(st.sampled_from(NODES), st.lists(st.integers(0, len(TAINTS) - 1), max_size=3) | st.none()),
        max_size=30,
    )
)
def test_taint_counts_follow_every_node_change_once_asked_for(operations):
    snapshot = Snapshot()
    tolerations = [(), ({"key": "gpu", "operator": "Exists"},), ({"key": "spot", "value": "a"},)]
    for name, taints in operations:
        if taints is None:
            snapshot.remove_node(name)
        else:
            snapshot.upsert_node(spec(name, 1000, 2**30, tuple(taints)))
        for wanted in tolerations:
            parsed = pod("p", tolerations=list(wanted)).tolerations
            for masks in snapshot.untolerated_taints(parsed):
                assert np.array_equal(snapshot.taint_counts(masks), counted_taints(snapshot, masks))
