"""Profiles load like KubeSchedulerConfiguration, and a bad one fails at load with one line naming it."""

import pytest

from policies.framework.profile import BUILTIN_PROFILES, ProfileSet, parse_profile, parse_profiles
from schemas.exceptions import ConfigError


def names(chain):
    return [plugin.name for plugin in chain]


def score_chain(profile):
    return [(plugin.name, weight) for plugin, weight in profile.score]


def test_an_empty_profile_is_the_default_plugin_set_in_upstream_order():
    profile = parse_profile({"schedulerName": "p"})
    # kube-scheduler v1.36's default_plugins.go without the volume plugins and DRA.
    assert names(profile.pre_enqueue) == ["SchedulingGates"]
    assert names(profile.pre_filter) == ["NodeAffinity", "PodTopologySpread"]
    assert names(profile.filter) == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    ]
    assert names(profile.post_filter) == ["DefaultPreemption"]
    assert score_chain(profile) == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]
    assert profile.queue_sort.name == "PrioritySort"
    assert profile.handle.kubernetes_version == (1, 36)


def test_disabling_star_removes_the_defaults_but_keeps_the_profiles_own_plugins():
    profile = parse_profile(
        {
            "schedulerName": "p",
            "plugins": {
                "score": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "NodeResourcesBalancedAllocation", "weight": 7}],
                }
            },
        }
    )
    assert score_chain(profile) == [("NodeResourcesBalancedAllocation", 7)]


def test_a_default_enabled_again_keeps_its_place_and_takes_the_new_weight():
    profile = parse_profile(
        {"schedulerName": "p", "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}]}}}
    )
    assert score_chain(profile) == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 5),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]


def test_multi_point_enables_a_plugin_at_every_point_it_implements():
    profile = parse_profile(
        {
            "schedulerName": "p",
            "plugins": {
                "queueSort": {"disabled": [{"name": "*"}]},
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
            },
        }
    )
    assert profile.queue_sort.name == "Coscheduling"
    # After the default PreFilter and PostFilter plugins.
    assert names(profile.pre_filter) == ["NodeAffinity", "PodTopologySpread", "Coscheduling"]
    assert names(profile.permit) == ["Coscheduling"]
    assert names(profile.post_filter) == ["DefaultPreemption", "Coscheduling"]


def test_one_plugin_instance_serves_every_point_it_is_enabled_at():
    profile = parse_profile({"schedulerName": "p"})
    fit_filter = next(p for p in profile.filter if p.name == "NodeResourcesFit")
    fit_score = next(p for p, _ in profile.score if p.name == "NodeResourcesFit")
    assert fit_filter is fit_score


def test_plugin_args_are_applied():
    profile = parse_profile(
        {
            "schedulerName": "p",
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [{"name": "cpu", "weight": 2}],
                        }
                    },
                }
            ],
        }
    )
    fit = profile.plugin("NodeResourcesFit")
    assert (fit.strategy, fit.resources) == ("MostAllocated", [("cpu", 2)])


def test_every_builtin_profile_loads():
    assert ProfileSet.builtin().names() == sorted(BUILTIN_PROFILES)


BAD = [
    (
        "an unknown plugin is named",
        {"plugins": {"score": {"enabled": [{"name": "NodeMagic"}]}}},
        "unknown plugin NodeMagic",
    ),
    (
        "a weight above 100 is refused",
        {"plugins": {"score": {"enabled": [{"name": "TaintToleration", "weight": 101}]}}},
        "weight must be an integer in 1..100",
    ),
    (
        "a negative weight is refused",
        {"plugins": {"score": {"enabled": [{"name": "TaintToleration", "weight": -1}]}}},
        "weight must be an integer in 1..100",
    ),
    (
        "a shape that is not increasing is refused",
        {
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "RequestedToCapacityRatio",
                            "requestedToCapacityRatio": {
                                "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 5}]
                            },
                        }
                    },
                }
            ]
        },
        "increasing order",
    ),
    (
        "a shape score above 10 is refused",
        {
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "RequestedToCapacityRatio",
                            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]},
                        }
                    },
                }
            ]
        },
        "less than or equal to 10",
    ),
    (
        "an unknown resource name is refused",
        {
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"resources": [{"name": "gpu"}]}}}
            ]
        },
        "unknown resource name 'gpu'",
    ),
    (
        "a RequestedToCapacityRatio strategy needs a shape",
        {
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
                }
            ]
        },
        "shape is required",
    ),
    (
        "an unknown strategy is refused",
        {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Random"}}}]},
        "scoringStrategy.type",
    ),
    (
        "an unknown argument is refused",
        {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"speed": 1}}]},
        "speed: unknown field",
    ),
    (
        "a plugin at a point it does not implement is refused",
        {"plugins": {"score": {"enabled": [{"name": "NodePorts"}]}}},
        "NodePorts does not implement score",
    ),
    ("an unknown extension point is refused", {"plugins": {"scoring": {}}}, "unknown extension point"),
    (
        "args for an unknown plugin are refused",
        {"pluginConfig": [{"name": "Nope", "args": {}}]},
        "unknown plugin Nope",
    ),
    (
        "two queue sorts are refused",
        {"plugins": {"queueSort": {"enabled": [{"name": "QOSSort"}]}}},
        "exactly one queueSort",
    ),
    ("an unknown profile field is refused", {"schedulingMode": "fast"}, "unknown field schedulingMode"),
]


@pytest.mark.parametrize(("case", "document", "message"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_profile_fails_at_load_with_one_line_naming_it(case, document, message):
    with pytest.raises(ConfigError) as error:
        parse_profile({"schedulerName": "mine", **document})
    text = str(error.value)
    assert message in text
    assert "profile mine" in text
    assert "\n" not in text


def test_a_configuration_with_two_profiles_of_one_name_is_refused():
    with pytest.raises(ConfigError, match="appears twice"):
        parse_profiles({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]})


def test_a_profile_can_be_replaced_while_others_keep_running():
    profiles = ProfileSet.builtin()
    before = profiles.get("default")
    profiles.replace(
        parse_profile(
            {
                "schedulerName": "default",
                "plugins": {
                    "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}
                },
            }
        )
    )
    assert profiles.get("default") is not before
    assert score_chain(profiles.get("default")) == [("NodeResourcesFit", 1)]
    assert profiles.get("binpack") is not None


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"estimator": "general", "strategy": "dynamic"}, ("general", "dynamic", True)),
        ({"strategy": "aggregated", "modeling": False}, ("model", "aggregated", False)),
    ],
    ids=["a general estimator with dynamic weights", "aggregated division with modeling switched off"],
)
def test_a_profile_carries_its_cluster_policy(
    policy: dict[str, object], expected: tuple[object, ...]
) -> None:
    profile = parse_profile({"schedulerName": "multi", "clusterPolicy": policy})
    assert profile.cluster_policy is not None
    assert (
        profile.cluster_policy.estimator,
        profile.cluster_policy.strategy,
        profile.cluster_policy.modeling,
    ) == expected


def test_a_bad_cluster_policy_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="clusterPolicy: estimator"):
        parse_profile({"schedulerName": "multi", "clusterPolicy": {"estimator": "guess"}})


def test_a_profile_without_a_cluster_policy_leaves_the_defaults_to_the_placer() -> None:
    assert parse_profile({"schedulerName": "plain"}).cluster_policy is None
