"""Resource models: Karmada's format, its validation rule by rule, the default grades, grading.

Rules and messages follow Karmada's ``pkg/apis/cluster/validation/validation.go``
(ValidateClusterResourceModels); grading follows ``pkg/modeling/modeling.go`` (getIndex: per resource the last
grade whose min is at most the free amount, the lowest over resources).
"""

import pytest

from policies.clusters.models import DEFAULT_MODELS, MAX_INT64, parse_resource_models
from schemas.exceptions import InvalidInput

MAX = str(MAX_INT64)
GI = 2**30


def ranges(*triples):
    return [{"name": name, "min": low, "max": high} for name, low, high in triples]


def grade(number, *triples):
    return {"grade": number, "ranges": ranges(*triples)}


def guide_three_grades():
    """The customised model of Karmada's cluster resource modeling guide: three grades of cpu and memory."""
    return [
        grade(0, ("cpu", "0", "1"), ("memory", "0", "4Gi")),
        grade(1, ("cpu", "1", "2"), ("memory", "4Gi", "16Gi")),
        grade(2, ("cpu", "2", MAX), ("memory", "16Gi", MAX)),
    ]


def guide_default_grades():
    """Karmada's default model, as its cluster resource modeling guide prints it (grades 0..8)."""
    cpu = ["0", "1", "2", "4", "8", "16", "32", "64", "128", MAX]
    memory = ["0", "4Gi", "16Gi", "32Gi", "64Gi", "128Gi", "256Gi", "512Gi", "1Ti", MAX]
    return [grade(g, ("cpu", cpu[g], cpu[g + 1]), ("memory", memory[g], memory[g + 1])) for g in range(9)]


def test_the_default_grades_are_karmadas_documented_default_model():
    parsed = parse_resource_models(guide_default_grades())
    assert parsed.grades == DEFAULT_MODELS.grades == tuple(range(9))
    assert parsed.resources == DEFAULT_MODELS.resources == ("cpu", "memory")
    assert parsed.mins == DEFAULT_MODELS.mins and parsed.maxs == DEFAULT_MODELS.maxs
    assert DEFAULT_MODELS.mins[8] == (128_000, 1024 * GI)


def test_a_model_round_trips_through_karmadas_json_form():
    parsed = parse_resource_models(guide_three_grades())
    again = parse_resource_models(parsed.to_documents())
    assert (again.grades, again.resources, again.mins, again.maxs) == (
        parsed.grades,
        parsed.resources,
        parsed.mins,
        parsed.maxs,
    )


RULES = [
    (
        "grades must be unique",
        [grade(0, ("cpu", "0", "1")), grade(0, ("cpu", "1", MAX))],
        "resourceModels[1].grade: grade 0 is declared twice",
    ),
    (
        "every grade must have as many resources as the grade before",
        [grade(0, ("cpu", "0", "1"), ("memory", "0", "4Gi")), grade(1, ("cpu", "1", MAX))],
        "resourceModels[1].ranges: grade 1 has 1 resources, grade 0 has 2",
    ),
    (
        "every grade must list the same resources in the same order",
        [
            grade(0, ("cpu", "0", "1"), ("memory", "0", "4Gi")),
            grade(1, ("memory", "4Gi", MAX), ("cpu", "1", MAX)),
        ],
        "resourceModels[1].ranges[0].name: grade 1 lists 'memory' where grade 0 lists 'cpu'",
    ),
    (
        "a range's max must be greater than its min",
        [grade(0, ("cpu", "0", "1")), grade(1, ("cpu", "1", "1")), grade(2, ("cpu", "1", MAX))],
        "resourceModels[1].ranges[0].max: grade 1 cpu: max (1000m) must be greater than min (1000m)",
    ),
    (
        "the first grade's mins must be 0",
        [grade(0, ("cpu", "500m", "1")), grade(1, ("cpu", "1", MAX))],
        "resourceModels[0].ranges[0].min: grade 0 cpu: the first grade's min must be 0, got 500m",
    ),
    (
        "each min must equal the previous grade's max, so ranges leave no gap",
        [grade(0, ("cpu", "0", "1")), grade(1, ("cpu", "2", MAX))],
        "resourceModels[1].ranges[0].min: grade 1 cpu: min (2000m) must equal the max of grade 0 (1000m)",
    ),
    (
        "each min must equal the previous grade's max, so ranges do not overlap",
        [grade(0, ("memory", "0", "4Gi")), grade(1, ("memory", "2Gi", MAX))],
        "resourceModels[1].ranges[0].min: grade 1 memory: min (2147483648) must equal the max of grade 0",
    ),
    (
        "the last grade's maxes must be MaxInt64",
        [grade(0, ("cpu", "0", "1")), grade(1, ("cpu", "1", "128"))],
        "resourceModels[1].ranges[0].max: grade 1 cpu: the last grade's max must be MaxInt64",
    ),
    (
        "a single grade must start at 0 and end at MaxInt64 too",
        [grade(0, ("cpu", "0", "64"))],
        "the last grade's max must be MaxInt64",
    ),
]


@pytest.mark.parametrize(("rule", "models", "message"), RULES, ids=[r[0] for r in RULES])
def test_each_validation_rule_has_one_clear_error(rule, models, message):
    with pytest.raises(InvalidInput) as caught:
        parse_resource_models(models)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


MALFORMED = [
    ("an empty list of grades is refused", [], "resourceModels: no grades"),
    ("a grade without ranges is refused", [{"grade": 0, "ranges": []}], "resourceModels[0].ranges"),
    ("a negative grade is refused", [grade(-1, ("cpu", "0", MAX))], "resourceModels[0].grade"),
    (
        "a grade listing a resource twice is refused",
        [grade(0, ("cpu", "0", MAX), ("cpu", "0", MAX))],
        "twice",
    ),
    (
        "an unknown range field is named",
        [{"grade": 0, "ranges": [{"name": "cpu", "min": 0, "mx": 1}]}],
        ".mx",
    ),
    (
        "a missing max is named",
        [{"grade": 0, "ranges": [{"name": "cpu", "min": 0}]}],
        "ranges[0].max: field required",
    ),
    ("a quantity that does not parse is named", [grade(0, ("cpu", "zero", MAX))], "ranges[0].min"),
    ("an unknown resource name is named", [grade(0, ("gpus", "0", MAX))], "ranges[0].name"),
]


@pytest.mark.parametrize(("case", "models", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_models_name_the_field(case, models, message):
    with pytest.raises(InvalidInput, match=None) as caught:
        parse_resource_models(models)
    assert message in str(caught.value)


def test_grades_need_not_be_consecutive_numbers():
    models = parse_resource_models([grade(3, ("cpu", "0", "4")), grade(7, ("cpu", "4", MAX))])
    assert models.grades == (3, 7) and models.position == {3: 0, 7: 1}


GUIDE_GRADING = [
    ("half a core and 2 Gi free is grade 0 (Karmada's guide)", {"cpu": 500, "memory": 2 * GI}, 0),
    ("1.5 cores and 10 Gi free is grade 1 (Karmada's guide)", {"cpu": 1500, "memory": 10 * GI}, 1),
    ("plenty of both is the last grade", {"cpu": 10**9, "memory": 2**61}, 2),
]


@pytest.mark.parametrize(("case", "free", "position"), GUIDE_GRADING, ids=[g[0] for g in GUIDE_GRADING])
def test_karmadas_documented_customised_model_grades_its_examples(case, free, position):
    assert parse_resource_models(guide_three_grades()).grade_position(free) == position


BOUNDARIES = [
    ("exactly a grade's mins is that grade (ranges are [min, max))", 1000, 4 * GI, 1),
    ("a millicore short of a core stays in grade 0", 999, 4 * GI, 0),
    ("a byte short of 4 Gi stays in grade 0", 1000, 4 * GI - 1, 0),
    ("the lowest grade over resources wins: 2 cores but 4 Gi is grade 1", 2000, 4 * GI, 1),
    ("128 cores and 1 Ti is the last grade", 128_000, 1024 * GI, 8),
    ("just under 128 cores is grade 7", 127_999, 1024 * GI, 7),
    ("a huge node is still the last grade", 10**12, 2**62, 8),
    ("nothing free is grade 0", 0, 0, 0),
    ("an overcommitted node (negative free) is grade 0", -500, -GI, 0),
    ("a resource the node lacks counts as 0 free", 64_000, None, 0),
]


@pytest.mark.parametrize(("case", "cpu", "memory", "position"), BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_default_grades_at_range_boundaries(case, cpu, memory, position):
    free = {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    assert DEFAULT_MODELS.grade_position(free) == position
