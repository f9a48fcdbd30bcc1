"""Codec throughput: eyrie's wire codec against pydantic's own JSON methods, in the same process.

    python -m bench.codec [--records N] [--repeat R]

Prints a table, then as its last line a JSON object with records/s for encode+decode of `PodRequest` and
`MetricSample` on each path, and ratios against pydantic's ``model_dump_json``/``model_validate_json``
(the baseline, same run). Decoding includes full validation.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.codec import decode, encode
from schemas.events import MetricSample
from schemas.pod import PodRequest


def pods(count: int) -> list[PodRequest]:
    return [
        PodRequest(
            uid=f"pod-{i:06d}",
            workload=f"job-{i % 97}",
            containers=[
                {
                    "name": "app",
                    "requests": {"cpu": f"{100 + i % 900}m", "memory": f"{128 + i % 512}Mi"},
                    "limits": {"cpu": "2", "memory": "1Gi"},
                },
                {"name": "sidecar", "requests": {"cpu": "50m", "memory": "64Mi"}},
            ],
            priority=i % 10,
            labels={"app": f"job-{i % 97}", "tier": "batch"},
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            created_at=float(i),
        )
        for i in range(count)
    ]


def samples(count: int) -> list[MetricSample]:
    return [
        MetricSample(
            ts=1_700_000_000.0 + i,
            node=f"node-{i % 500:04d}",
            values={"cpu": 1.5 + i % 7, "memory": 2.5e9 + i, "bandwidth": 1e8, "disk": 1e10},
        )
        for i in range(count)
    ]


def rate(
    models: list[Any], encoder: Callable[[Any], bytes], decoder: Callable[[bytes], Any], repeat: int
) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for model in models:
            decoder(encoder(model))
        best = min(best, time.perf_counter() - start)
    return len(models) / best


def paths(model: type[BaseModel]) -> dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]]:
    return {
        # What the topics use (schemas.codec): pydantic-core straight to and from bytes.
        "eyrie": (encode, lambda raw: decode(model, raw)),
        # The baseline: pydantic's public JSON methods, what a plain pydantic service calls.
        "pydantic": (lambda m: m.model_dump_json().encode(), model.model_validate_json),
        # The alternative that lost: orjson around Python-level dump/validate.
        "orjson": (
            lambda m: orjson.dumps(m.model_dump(mode="json")),
            lambda raw: model.model_validate(orjson.loads(raw)),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    figures: dict[str, Any] = {"records": args.records, "cores": os.cpu_count()}
    print(f"{'model':<14}{'path':<10}{'records/s':>14}")
    for name, models, model in (
        ("PodRequest", pods(args.records), PodRequest),
        ("MetricSample", samples(args.records), MetricSample),
    ):
        measured = {}
        for path, (encoder, decoder) in paths(model).items():
            assert decoder(encoder(models[0])) == models[0]
            measured[path] = rate(models, encoder, decoder, args.repeat)
            print(f"{name:<14}{path:<10}{measured[path]:>14,.0f}")
        figures[name] = {
            "eyrie_per_s": round(measured["eyrie"]),
            "pydantic_per_s": round(measured["pydantic"]),
            "orjson_per_s": round(measured["orjson"]),
            "ratio": round(measured["eyrie"] / measured["pydantic"], 3),
            "orjson_ratio": round(measured["orjson"] / measured["pydantic"], 3),
        }
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
