"""The Redis-style filters: LimitSum (limits within a share of memory) and RoleSpread (masters spread out)."""

from tests.policies.builders import node, place, pod, scheduler

LIMITS = {
    "schedulerName": "redis",
    "plugins": {"filter": {"enabled": [{"name": "LimitSum"}]}},
    "pluginConfig": [{"name": "LimitSum", "args": {"resource": "memory", "ratio": 0.5}}],
}
SPREAD = {"schedulerName": "redis", "plugins": {"filter": {"enabled": [{"name": "RoleSpread"}]}}}


def redis(uid, memory_limit=None, memory_request=None, **fields):
    resources = {}
    if memory_request:
        resources["requests"] = {"memory": memory_request}
    if memory_limit:
        resources["limits"] = {"memory": memory_limit}
    return pod(uid, scheduler_name="redis", containers=[resources], **fields)


def test_limit_sum_keeps_the_sum_of_memory_limits_under_the_ratio():
    # 8 GiB allocatable, ratio 0.5: limits may add up to 4 GiB, whatever the requests say.
    s = scheduler([node("a", memory="8Gi")], LIMITS)
    result = place(s, redis("r1", "3Gi", "1Gi"), redis("r2", "1Gi", "1Gi"), redis("r3", "1Gi", "1Gi"))
    assert result == {"r1": "a", "r2": "a", "r3": None}


def test_limit_sum_counts_the_request_of_a_pod_without_a_limit():
    s = scheduler([node("a", memory="8Gi")], LIMITS)
    assert place(s, redis("r1", memory_request="4Gi"), redis("r2", "1Mi")) == {"r1": "a", "r2": None}


def test_limit_sum_names_its_reason():
    s = scheduler([node("a", memory="8Gi")], LIMITS)
    explanation = s.explain(redis("big", "5Gi"))
    assert explanation.filtered == {"a": ["node(s) would exceed 0.5 x allocatable memory in pod limits"]}


def master(uid, group="redis-a", min_available=None):
    fields = {"labels": {"group": group, "role": "master"}}
    if min_available:
        fields["pod_group"] = {"name": group, "min_available": 1}
    return pod(uid, scheduler_name="redis", cpu="100m", **fields)


def test_role_spread_puts_no_more_than_half_of_a_groups_masters_on_one_node():
    s = scheduler([node("a"), node("b")], SPREAD)
    result = place(s, master("m1"), master("m2"), master("m3"), master("m4"))
    per_node = {n: sum(1 for v in result.values() if v == n) for n in ("a", "b")}
    assert per_node == {"a": 2, "b": 2}


def test_role_spread_always_lets_the_first_master_in():
    s = scheduler([node("a")], SPREAD)
    assert place(s, master("m1")) == {"m1": "a"}
    assert s.explain(master("m2")).filtered == {"a": ["node(s) already hold 1 master(s) of group redis-a"]}


def test_role_spread_ignores_replicas_and_other_groups():
    s = scheduler([node("a")], SPREAD)
    replica = pod("r1", scheduler_name="redis", labels={"group": "redis-a", "role": "replica"})
    other = master("x1", group="redis-b")
    assert place(s, master("m1"), replica, other) == {"m1": "a", "r1": "a", "x1": "a"}
