"""NodeAffinity (preferred terms, addedAffinity, matchFields) and NodeName, against kube-scheduler v1.36's
rules: filter verdicts with their reasons, and normalised preferred-term scores."""

import numpy as np
import pytest

from policies.framework.contract import CycleContext
from policies.framework.profile import parse_profile
from policies.framework.status import Code
from policies.plugins.nodeaffinity import REASON, Args, new
from policies.snapshot import Snapshot
from schemas.exceptions import ConfigError
from schemas.node import NodeSpec
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, profile, scheduler

NA = "NodeAffinity"
ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ZONES = [
    node("a", labels={"zone": "z1", "disk": "ssd", "gen": "3"}),
    node("b", labels={"zone": "z1", "gen": "5"}),
    node("c", labels={"zone": "z2", "disk": "ssd"}),
]


def term(*expressions, fields=()):
    return {
        "match_expressions": [dict(zip(("key", "operator", "values"), e, strict=False)) for e in expressions],
        "match_fields": [{"key": "metadata.name", "operator": op, "values": v} for op, v in fields],
    }


def added(required=None, preferred=None):
    affinity = {}
    if required is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return profile(config={NA: {"addedAffinity": affinity}})


def plugin_context(labels_by_node, pod_fields, args=None):
    """The plugin alone on a snapshot of nodes with these labels, and a cycle context for the pod."""
    snapshot = Snapshot()
    for name, labels in labels_by_node.items():
        snapshot.upsert_node(NodeSpec(name=name, allocatable={"cpu": 1000}, labels=labels))
    incoming = PodRequest.model_validate({"uid": "p", "containers": [], **pod_fields})
    plugin = new(Args.model_validate(args) if args else None, None)
    return plugin, CycleContext(incoming, snapshot.pod_info(incoming), snapshot, 0.0)


def matching(labels_by_node, pod_fields):
    plugin, ctx = plugin_context(labels_by_node, pod_fields)
    rows = np.array([ctx.snapshot.index[name] for name in labels_by_node])
    keep = plugin.filter(ctx, rows)
    return sorted(name for name, ok in zip(labels_by_node, keep.tolist(), strict=True) if ok)


@pytest.mark.parametrize(
    ("case", "fields", "feasible"),
    [
        (
            "a node selector alone keeps the nodes with the label",
            {"node_selector": {"zone": "z1"}},
            ["a", "b"],
        ),
        (
            "a node selector and required affinity must both hold",
            {"node_selector": {"zone": "z1"}, "node_affinity": [term(("disk", "In", ["ssd"]))]},
            ["a"],
        ),
        (
            "required terms are ORed",
            {"node_affinity": [term(("zone", "In", ["z2"])), term(("gen", "Gt", ["4"]))]},
            ["b", "c"],
        ),
        (
            "matchFields metadata.name In picks that node",
            {"node_affinity": [term(fields=[("In", ["b"])])]},
            ["b"],
        ),
        (
            "matchFields NotIn and an expression in one term are ANDed",
            {"node_affinity": [term(("disk", "Exists"), fields=[("NotIn", ["a"])])]},
            ["c"],
        ),
        ("an empty term matches no node", {"node_affinity": [term()]}, []),
    ],
)
def test_required_node_affinity_filters_as_upstream(case, fields, feasible):
    s = scheduler(ZONES)
    explanation = s.explain(pod("p", **fields))
    assert sorted(explanation.feasible) == feasible
    for name in {"a", "b", "c"} - set(feasible):
        assert explanation.filtered[name] == ["node(s) didn't match Pod's node affinity/selector"]


def test_required_terms_pinning_disjoint_node_names_conflict_in_prefilter():
    s = scheduler(ZONES)
    terms = [term(fields=[("In", ["a"]), ("In", ["b"])])]
    explanation = s.explain(pod("p", node_affinity=terms))
    assert explanation.selected is None
    assert "pod affinity terms conflict" in (explanation.message or "")


def test_conflicting_metadata_name_terms_fail_prefilter_unresolvable_and_filter_with_the_pod_reason():
    # Upstream's "Pod with two conflicting mach field requirements" checks both stages on the plugin.
    terms = [term(fields=[("In", ["node1"]), ("In", ["node2"])])]
    plugin, ctx = plugin_context({"node2": {"foo": "bar"}}, {"node_affinity": terms})
    status = plugin.pre_filter(ctx)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ("pod affinity terms conflict",)
    rows = np.array([ctx.snapshot.index["node2"]])
    assert plugin.filter(ctx, rows).tolist() == [False]
    assert plugin.reasons(ctx, rows) == [[REASON]]


@pytest.mark.parametrize(
    ("case", "labels", "expression", "matched"),
    [
        ("Gt compares a node's integer label", {"n1": "5", "n2": "3"}, ("Gt", ["4"]), ["n1"]),
        (
            "a node label Go cannot parse as an integer matches neither Gt nor Lt, even one Python reads",
            {"n1": "5_0", "n2": "٣", "n3": " 7"},
            ("Gt", ["1"]),
            [],
        ),
        ("a signed node label parses as Go reads it", {"n1": "+7", "n2": "-3"}, ("Lt", ["0"]), ["n2"]),
        (
            "a node label beyond int64 does not parse",
            {"n1": "9223372036854775808", "n2": "9223372036854775807"},
            ("Gt", ["0"]),
            ["n2"],
        ),
        (
            "int64 labels compare exactly, with no float rounding",
            {"n1": "9007199254740993", "n2": "9007199254740992"},
            ("Gt", ["9007199254740992"]),
            ["n1"],
        ),
        (
            "a Gt value that is not a Go integer leaves the term unparsed and matching nothing",
            {"n1": "60", "n2": "3"},
            ("Gt", ["5_0"]),
            [],
        ),
        (
            "a Lt value beyond int64 leaves the term unparsed and matching nothing",
            {"n1": "1", "n2": "3"},
            ("Lt", ["99999999999999999999"]),
            [],
        ),
    ],
)
def test_gt_and_lt_parse_integers_as_go_does(case, labels, expression, matched):
    operator, values = expression
    nodes = {name: {"gen": value} for name, value in labels.items()}
    assert matching(nodes, {"node_affinity": [term(("gen", operator, values))]}) == matched


@pytest.mark.parametrize(
    ("case", "key", "matched"),
    [
        ("a plain key parses", "zone", ["n1"]),
        ("a key with a DNS-subdomain prefix parses", "topology.kubernetes.io/zone", ["n1"]),
        ("a key with an empty prefix does not parse and matches nothing", "/zone", []),
        ("a key with two slashes does not parse", "a/b/zone", []),
        ("a key with an upper-case prefix does not parse", "Example.com/zone", []),
        ("a key with a space does not parse", "invalid key", []),
    ],
)
def test_required_terms_with_keys_upstream_cannot_parse_match_nothing(case, key, matched):
    nodes = {"n1": {key: "z1"}, "n2": {key: "z2"}}
    assert matching(nodes, {"node_affinity": [term((key, "In", ["z1"]))]}) == matched


def test_added_required_affinity_is_anded_with_the_pods_and_named_as_enforced():
    s = scheduler(ZONES, added(required=[term(("zone", "In", ["z1"]))]))
    explanation = s.explain(pod("p", scheduler_name="test", node_affinity=[term(("disk", "Exists"))]))
    assert explanation.feasible == ["a"]
    assert explanation.filtered == {
        "b": ["node(s) didn't match Pod's node affinity/selector"],
        "c": ["node(s) didn't match scheduler-enforced node affinity"],
    }


@pytest.mark.parametrize(
    ("case", "preferred", "pod_preferred", "expected"),
    [
        ("no preferred terms: the plugin is skipped and scores nothing", None, [], {"a": 0, "b": 0, "c": 0}),
        (
            "matching weights are summed, then scaled so the best node scores 100",
            None,
            [
                {"weight": 2, "preference": term(("zone", "In", ["z1"]))},
                {"weight": 6, "preference": term(("disk", "Exists"))},
            ],
            {"a": 100, "b": 25, "c": 75},
        ),
        (
            "addedAffinity's preferred terms add to the pod's",
            [
                {
                    "weight": 8,
                    "preference": {"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]},
                }
            ],
            [{"weight": 4, "preference": term(fields=[("In", ["b"])])}],
            {"a": 100, "b": 50, "c": 0},
        ),
        (
            "no node matching any preferred term scores all zeros",
            None,
            [{"weight": 5, "preference": term(("zone", "In", ["z9"]))}],
            {"a": 0, "b": 0, "c": 0},
        ),
    ],
)
def test_preferred_node_affinity_scores_as_upstream(case, preferred, pod_preferred, expected):
    s = scheduler(ZONES, added(preferred=preferred) if preferred else profile())
    explanation = s.explain(pod("p", scheduler_name="test", preferred_node_affinity=pod_preferred))
    assert explanation.scores[NA] == expected


@pytest.mark.parametrize(
    ("case", "affinity", "message"),
    [
        (
            "an unknown operator",
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}
                ]
            },
            "operator",
        ),
        (
            "matchFields on a field other than metadata.name",
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "spec.x", "operator": "In", "values": ["a"]}]}
                    ]
                }
            },
            "metadata.name",
        ),
        (
            "a negative weight (upstream would fail every pod a node matching it scores for)",
            {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": -1, "preference": {}}]},
            "weight",
        ),
        (
            # Upstream's TestValidateNodeAffinityArgs "invalid added affinity": both terms are reported.
            "a required key and a preferred matchFields upstream cannot parse are both named",
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "invalid/label/key", "operator": "In", "values": ["label-1-val"]}
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1", "node-2"]}
                            ]
                        },
                    }
                ],
            },
            r"nodeSelectorTerms\[0\], preferredDuringSchedulingIgnoredDuringExecution\[0\]: cannot be",
        ),
        (
            "a preferred matchFields with two values alone",
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1", "node-2"]}
                            ]
                        },
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution\\[0\\]: cannot be parsed",
        ),
        (
            "a Gt value that is not a Go integer",
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["1_0"]}]}
                    ]
                }
            },
            "cannot be parsed",
        ),
    ],
)
def test_bad_added_affinity_fails_when_the_profile_loads(case, affinity, message):
    with pytest.raises(ConfigError, match=message):
        parse_profile(profile(config={NA: {"addedAffinity": affinity}}))


def test_valid_added_affinity_loads():
    # Upstream's TestValidateNodeAffinityArgs "valid added affinity".
    affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "label-1", "operator": "In", "values": ["label-1-val"]}]}
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 1,
                "preference": {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]
                },
            }
        ],
    }
    parse_profile(profile(config={NA: {"addedAffinity": affinity}}))


@pytest.mark.parametrize(
    ("case", "terms"),
    [("no terms at all", []), ("only an empty term", [{}])],
)
def test_added_required_affinity_without_terms_matches_no_node(case, terms):
    # Upstream's NodeSelector with no (non-empty) term matches nothing; the args are valid.
    explanation = scheduler(ZONES, added(required=terms)).explain(pod("p", scheduler_name="test"))
    assert explanation.feasible == []
    assert explanation.filtered == {name: [ENFORCED] for name in ("a", "b", "c")}


@pytest.mark.parametrize(
    ("case", "preferred", "expected"),
    [
        (
            "a weight above 100 counts in full (upstream validates no range for addedAffinity)",
            [
                {"weight": 300, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
                {"weight": 100, "preference": {"matchExpressions": [{"key": "gen", "operator": "Exists"}]}},
            ],
            {"a": 100, "b": 25, "c": 75},
        ),
        (
            "a weight of 0 drops the term",
            [
                {"weight": 0, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
                {"weight": 1, "preference": {"matchExpressions": [{"key": "gen", "operator": "Exists"}]}},
            ],
            {"a": 100, "b": 100, "c": 0},
        ),
    ],
)
def test_added_preferred_weights_are_used_as_upstream_reads_them(case, preferred, expected):
    explanation = scheduler(ZONES, added(preferred=preferred)).explain(pod("p", scheduler_name="test"))
    assert explanation.scores[NA] == expected


def test_a_pods_preferred_term_that_does_not_parse_counts_for_no_node():
    # Upstream's PreScore fails the pod here; eyrie scores it by its other terms (see the plugin's docstring).
    preferred = [
        {"weight": 2, "preference": term(("invalid key", "In", ["bar"]))},
        {"weight": 4, "preference": term(("zone", "In", ["z1"]))},
    ]
    explanation = scheduler(ZONES).explain(pod("p", preferred_node_affinity=preferred))
    assert explanation.scores[NA] == {"a": 100, "b": 100, "c": 0}


@pytest.mark.parametrize(
    ("case", "node_name", "feasible"),
    [
        ("a pod without a node name fits every node", None, ["a", "b", "c"]),
        ("a pod naming a node fits that node only", "b", ["b"]),
        ("a pod naming an unknown node fits none", "zz", []),
    ],
)
def test_node_name_filters_to_the_named_node(case, node_name, feasible):
    s = scheduler(ZONES)
    explanation = s.explain(pod("p", node_name=node_name))
    assert sorted(explanation.feasible) == feasible
    for name in {"a", "b", "c"} - set(feasible):
        assert explanation.filtered[name] == ["node(s) didn't match the requested node name"]
