"""Two real workers, one shard: the one that does not own it follows it as a hot standby; the owner is
killed with SIGKILL mid-replay; the standby must place again within the group's failure detection plus a
short tail, and every pod must end where an offline replay of the same log puts it, none lost, none
applied twice, no node over its allocatable.

The same run without the standby (the survivor restores the shard from its checkpoint and the sequencer)
is the baseline the takeover time is compared with. ``EYRIE_TAKEOVER_PODS`` / ``EYRIE_TAKEOVER_NODES`` size
the workload for a measurement (docs/checkpoints.md#hot-standby); the defaults keep the test short.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.eventlog import read_events
from schemas.events import Binding, BindingResult
from schemas.pod import PodDeleted, PodRequest
from streams.demo.workload import NODE_SECONDS_PER_ARRIVAL, generate_gpu_like_log
from streams.local.broker import free_ports
from streams.recording.replay import OfflineResult, replay_live, replay_offline
from streams.settings import Settings
from tests.faults.test_faults import (
    Progress,
    follow,
    judge,
    owner_of_placement,
    read_outputs,
    settle,
    until,
)
from tests.streams.test_pipeline import start_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PODS = int(os.environ.get("EYRIE_TAKEOVER_PODS", "3000"))
NODES = int(os.environ.get("EYRIE_TAKEOVER_NODES", "60"))
KILL_AT = 0.4
"""The share of the pods decided when the owner is killed."""
TAIL_ALLOWANCE_S = 4.0
"""Beyond failure detection: the rebalance's own round trips, the tail since the standby's last poll of
the committed offset, and the backlog that piled up during detection, on a 2-core machine shared with the
broker, the applier and the replayer."""
ADOPTED = re.compile(r"took over from the standby at offset \d+ \((\d+) records of tail\) in ([0-9.]+) s")
RESTORED = re.compile(r"restored from checkpoint \S+ at offset \d+ .* in ([0-9.]+) s")

# ------------------------------------------------------------------------------------------- builders


def detection_bound(settings: Settings) -> float:
    """From the kill to the survivor's first decision, at most: the session expires at most
    `session_timeout_s` after the last heartbeat, the survivor hears of the rebalance at its next heartbeat,
    and rejoins and syncs within about one more; then the tail."""
    return settings.session_timeout_s + 2 * settings.heartbeat_interval_s + TAIL_ALLOWANCE_S


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, OfflineResult]]:
    log = tmp_path_factory.mktemp("takeover") / "workload.jsonl"
    gap = NODE_SECONDS_PER_ARRIVAL / NODES * 4.0  # busy, not saturated (as tests/faults)
    generate_gpu_like_log(log, nodes=NODES, pods=PODS, mean_interarrival_s=gap, metrics=False)
    yield log, replay_offline(log, Settings())


def run_and_kill(
    kafka_bootstrap: str, log: Path, workdir: Path, standby: bool
) -> tuple[float, str, Settings, list[Binding | PodDeleted], list[BindingResult]]:
    """Replays `log` through two workers, kills the shard's owner at `KILL_AT`: the seconds from the kill
    to the first binding decided after it, the processes' logs, the settings, and the outputs."""
    uids = {e.value.uid for e in read_events(log) if isinstance(e.value, PodRequest)}
    pipeline = start_pipeline(kafka_bootstrap, workdir)
    pipeline.kill("worker")
    pipeline.env["EYRIE_STANDBY_SHARDS"] = "1" if standby else "0"
    # Checkpoints often enough that the restore of the baseline reads one, not the whole partition.
    pipeline.env["EYRIE_CHECKPOINT_EVERY_ENVELOPES"] = "500"
    ports = dict(zip(("worker-0", "worker-1"), free_ports(2), strict=True))
    for name, port in ports.items():
        pipeline.start("worker", "--web-port", str(port), name=name)
    settings = pipeline.settings.model_copy(update={"standby_shards": 1 if standby else 0})
    try:

        async def scenario() -> float:
            progress = Progress()
            stop = asyncio.Event()
            follower = asyncio.create_task(follow(settings, progress, stop))
            replay = asyncio.create_task(replay_live(log, settings))
            await until(lambda: progress.count() >= KILL_AT * PODS, f"{KILL_AT:.0%} of the results")
            if standby:
                # Only the worker that does not own the shard follows it; on a loaded machine it may start
                # following after the results above, and a kill before that tests nothing of the standby.
                await until(lambda: "standby: following shards" in pipeline.logs(), "the standby following")
            owner = owner_of_placement(ports, settings)
            killed = time.monotonic()
            killed_wall = time.time()
            pipeline.kill(owner)
            await replay
            await settle(uids, progress, stop, follower)
            first = progress.first_binding_created_after(killed_wall)
            assert first is not None, "no binding after the kill"
            return first - killed

        takeover = asyncio.run(scenario())
        stream, results = asyncio.run(read_outputs(settings))
    finally:
        pipeline.stop()
    return takeover, pipeline.logs(), settings, stream, results


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    "standby",
    [
        pytest.param(True, id="The survivor follows the shard as a hot standby and adopts it."),
        pytest.param(False, id="Without a standby the survivor restores the shard from its checkpoint."),
    ],
)
def test_the_survivor_places_again_within_failure_detection_and_every_pod_ends_as_offline(
    kafka_bootstrap: str, workload: tuple[Path, OfflineResult], tmp_path: Path, standby: bool
) -> None:
    log, offline = workload
    uids = {e.value.uid for e in read_events(log) if isinstance(e.value, PodRequest)}
    takeover, logs, settings, stream, results = run_and_kill(kafka_bootstrap, log, tmp_path, standby)
    adopted, restored = ADOPTED.findall(logs), RESTORED.findall(logs)
    print(
        f"standby={standby} pods={PODS} nodes={NODES} takeover_s={takeover:.2f} "
        f"adopted={adopted} restored={restored}"
    )
    if standby:
        assert adopted, "the survivor did not adopt the standby's shard"
        assert takeover <= detection_bound(settings), (takeover, detection_bound(settings))

    judge(uids, stream, results, log, offline).assert_clean()
