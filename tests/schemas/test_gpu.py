"""GPU fields of the wire models: what validates, the one-line errors naming the field, and manifests'
GPU-sharing annotations."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput, ManifestError
from schemas.gpu import GpuRequest, format_gpu_index, parse_gpu_index
from schemas.manifest import pod_from_manifest
from schemas.pod import PodRequest


def manifest(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {"containers": [{"name": "c"}]},
    }


def annotations(
    milli: str | None = None, count: str | None = None, model: str | None = None
) -> dict[str, Any]:
    names = {
        "alibabacloud.com/gpu-milli": milli,
        "alibabacloud.com/gpu-count": count,
        "alibabacloud.com/gpu-card-model": model,
    }
    return manifest(**{key: value for key, value in names.items() if value is not None})


@pytest.mark.parametrize(
    ("case", "gpu", "error"),
    [
        (
            "a share of more than one card is refused on count",
            {"milli": 500, "count": 2},
            "gpu.count: must be 1",
        ),
        ("milli above a card is refused", {"milli": 1001}, "gpu.milli: "),
        ("zero milli is refused", {"milli": 0}, "gpu.milli: "),
        ("an empty model name is refused", {"milli": 10, "models": [""]}, "gpu.models.0: "),
        ("zero cards are refused", {"count": 0}, "gpu.count: "),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_bad_gpu_requests_name_the_field(case, gpu, error):
    with pytest.raises(InvalidInput) as caught:
        model_from_mapping(PodRequest, {"uid": "p", "gpu": gpu})
    assert str(caught.value).startswith(error), str(caught.value)


def test_a_request_defaults_to_one_whole_card():
    assert GpuRequest() == GpuRequest(milli=1000, count=1, models=[])
    assert not GpuRequest().is_share and GpuRequest(milli=10).is_share


@pytest.mark.parametrize(
    ("case", "document", "expected"),
    [
        ("milli alone is a share of one card", annotations("300"), GpuRequest(milli=300)),
        ("count alone is whole cards", annotations(count="4"), GpuRequest(count=4)),
        (
            "models are split on bars",
            annotations("500", "1", "T4|P100"),
            GpuRequest(milli=500, models=["T4", "P100"]),
        ),
        ("a count of zero asks for no GPU", annotations("1000", "0"), None),
        ("no annotations ask for no GPU", manifest(), None),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_manifest_annotations_become_the_gpu_request(case, document, expected):
    assert pod_from_manifest(document).gpu == expected


@pytest.mark.parametrize(
    ("case", "document", "error"),
    [
        (
            "a share of two cards names the count annotation",
            annotations("300", "2"),
            "metadata.annotations.alibabacloud.com/gpu-count: must be 1",
        ),
        (
            "too much milli names the milli annotation",
            annotations("1500"),
            "metadata.annotations.alibabacloud.com/gpu-milli: ",
        ),
        (
            "a count that is no integer is refused",
            annotations(count="two"),
            "metadata.annotations.alibabacloud.com/gpu-count: expected an integer",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_bad_annotations_name_the_annotation(case, document, error):
    with pytest.raises(ManifestError) as caught:
        pod_from_manifest(document)
    assert str(caught.value).startswith(error), str(caught.value)


def test_card_indexes_round_trip_and_bad_ones_are_refused():
    assert parse_gpu_index(format_gpu_index([0, 2, 3])) == (0, 2, 3)
    assert parse_gpu_index("") == ()
    for bad in ("a", "1-1", "-1", "99"):
        with pytest.raises(InvalidInput, match=r"alibabacloud\.com/gpu-index"):
            parse_gpu_index(bad)
