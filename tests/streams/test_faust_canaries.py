"""Canaries for what streams/faust_overrides/ overrides or relies on in faust-streaming, mode and aiokafka.

The three libraries are pinned exactly (pyproject.toml), and each override there was written against the
upstream code it replaces, copies or reaches into. Each case below hashes that upstream code as the pinned
version has it; an upgrade that changes it fails the case, naming the override to re-check. Once the
override is checked (or changed) against the new code, the new hash goes in the table.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import streams.faust_overrides

OVERRIDES = Path(streams.faust_overrides.__file__).parent

DISTRIBUTIONS = {"faust": "faust-streaming", "mode": "mode-streaming", "aiokafka": "aiokafka"}

CANARIES: tuple[tuple[str, str, str], ...] = (
    (
        "faust.App._new_consumer",
        "fetching.py",
        "bff6ccd646b71ea99a7e7a7d1c62adbf3d34432a0b42a39e6f60b4c0307d89c8",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer._new_consumer_thread",
        "fetching.py",
        "0870ec53dea75083995e3565c0f0a25a1c63ecceaeb238e92e2585e3623af5a9",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer._drain_messages",
        "fetching.py",
        "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer._add_gap",
        "fetching.py",
        "4df2573ded7c1c2cde04dc6bde6d4480cb5875ef565256e56966b585ae39b1c1",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.pause_partitions",
        "fetching.py",
        "27a1c94bdacd54de06593ec4eb040b32e9e7c9534e9af041f6ed66723df5f922",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.resume_partitions",
        "fetching.py",
        "afe6b7c02a41d63cd46d47a03f09b547c85289c108de21d682970057d1015c3b",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer._commit_tps",
        "fetching.py",
        "a20e230b05ae8b151ac9f78fa77a102003a948c66c24c9d3588e39cb12859b7e",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.on_partitions_assigned",
        "fetching.py",
        "29ce96596f05a18c6738eeb2e0d308dd8ef09e9116854129372c474f8638c069",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.perform_seek",
        "fetching.py",
        "0e8c130ff4b0afd82c0be9c5fd831316e10febc62c94032833911096e156d7c6",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.resume_flow",
        "fetching.py",
        "db59630f25b5819b092c90649e1046cbea184e91a0aff59368e7747665536dd5",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.seek",
        "fetching.py",
        "b86a9fe05f956b30cf299c787b6787c6e0349cbf1ae556f2456a1e97b15dbb22",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.Worker",
        "fetching.py",
        "e213e6b441f98671761adb4ddb39c05ee58dbc9f07aec11e6ada48741649ad2e",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._serve",
        "fetching.py",
        "67809eae09573ac7b43d0679e70a5394acc739bee5809d30b89e9ea8a7ac4b38",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.call_thread",
        "fetching.py",
        "479edda75b54734b48dabbb33071259949ded0a6f9fa6f82e81afdc42aff6e55",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.getmany",
        "fetching.py",
        "26fc5fc9f3b667e104f9657dbc49da3b3b6620d40cc9856761cbaf4da2172557",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._stopped_set",
        "fetching.py",
        "af9b1ff7781223c29f6e95d47466ee241fa6fedcf31abb786200b2013f19bba0",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.set_shutdown",
        "fetching.py",
        "ada84bf0cade97be57b5c70dd5d953ba339c3b84a76e424c8855d9cfd9a17938",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._gather_remaining_tasks",
        "fetching.py",
        "6f65b92dd101248509e375f2087a1f46997098217fbabdd8b558efbb34b72915",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._create_worker_consumer",
        "fetching.py",
        "c2701bfc3e6f6cad95c2be36d6a255a86e2c57d18d36cc1082b5fb5c482d99d7",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.verify_event_path",
        "fetching.py",
        "b983e7735f647cb34650530fb0f1bc709e8cb67d54c483b939b14b49b8d931e0",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.verify_recovery_event_path",
        "fetching.py",
        "8c26b3ec3856396a72b0a7cbe9ed4250f8f4626ac19e1b48af53bc6432a2c836",
    ),
    (
        "aiokafka.AIOKafkaConsumer.start",
        "fetching.py",
        "2f1ba70443327538800d348e61042cdedd5a5e6306f40ebe1a06dddba7494c45",
    ),
    (
        "faust.Stream.take_events",
        "batching.py",
        "607d48aead118ba8ea868718a0df87de1c5fcecd10ec542c659b448796728e08",
    ),
    (
        "faust.Stream._enable_passive",
        "batching.py",
        "64da8ce9f729e30ea2c6952a4cb55617c1231f82793c4435966a8b811a0f26e8",
    ),
    (
        "faust.Stream.on_stop",
        "batching.py",
        "81b327b1578dff1c76da6f64a0ea3a2e9ce936b5896eb98502f61f175186fcdd",
    ),
    (
        "faust.Table.on_key_set",
        "tables.py",
        "a370e35ca55c2c7e36e93f0d4b485927c32d49199043cab2314572846184dd94",
    ),
    (
        "faust.Table.on_key_del",
        "tables.py",
        "4f2900b2f9d24a080d5cbc9eaa1f5566f1d11e56916e79b02f079c52f4751053",
    ),
    (
        "faust.Table.partition_for_key",
        "tables.py",
        "3b2291811b8dd791cdd0e690b2b09d966a4e961e2a2861182241195696393bed",
    ),
    (
        "faust.Table._new_store_by_url",
        "tables.py",
        "343a8125107d3f69ced468ee156659955d31abbc3bbed3df0e6ac87b474f850b",
    ),
    (
        "faust.stores.rocksdb.Store._set",
        "tables.py",
        "4227e561e288d9413bf663a3a67940fd4976f5484e70e49445858ce4d400d26e",
    ),
    (
        "faust.stores.rocksdb.Store._get",
        "tables.py",
        "7ae8dfd6d7754a5952ae162d4d5cf0d51a8a020ed730a4a7c7dc7f7c84e73fb8",
    ),
    (
        "faust.stores.rocksdb.Store._contains",
        "tables.py",
        "bd7d4e5252a71b9a5705677611435431f80b92e1ea145b6cf48151fc581d7889",
    ),
    (
        "faust.stores.rocksdb.Store._del",
        "tables.py",
        "07f42ff3caefffddb002ba3c316120ee8a608a15021fa226fd8e9ba2635004a9",
    ),
    (
        "faust.stores.rocksdb.Store._db_for_partition",
        "tables.py",
        "cb7e67d5f9efc4bced7b7ab09a55fe717c352daad5b693594e3f7ca52a98787f",
    ),
    (
        "faust.stores.memory.Store.persisted_offset",
        "tables.py",
        "fbba5c654497938828d8672f6424cf21883191422fa369a7172fbe6a5309aabf",
    ),
    (
        "faust.stores.memory.Store.on_recovery_completed",
        "tables.py",
        "a00bef343e139602606996e88809e62731a9113691ae678095266a52e0e0b013",
    ),
    (
        "faust.stores.memory.Store.apply_changelog_batch",
        "tables.py",
        "71863e3cd727aac2001c4f19a393c637275eab36056c9a2d395ed1c7528e7647",
    ),
    (
        "faust.stores.base.Store.on_rebalance",
        "tables.py",
        "a32fbe3c18de4288cda6a45d161fead88e838448760b178083e0cd0bf3c04495",
    ),
    (
        "faust.stores.rocksdb.Store.persisted_offset",
        "tables.py",
        "6f2e502fb86043a1cf0adca5c2fffb197579db01b31dbba3b0415aaacc35a2ed",
    ),
    (
        "faust.stores.rocksdb.Store.set_persisted_offset",
        "tables.py",
        "b4c811926678346ebb8c40486dbc46d0fbac2bbeaa592384bd955112556acf45",
    ),
    (
        "faust.stores.rocksdb.Store.on_rebalance",
        "tables.py",
        "38357aed5b7fc777ec64575a10531f9dc0436ef6f29f5f8a27904a689aa8a991",
    ),
    (
        "faust.Table.on_rebalance",
        "tables.py",
        "0812ad692171a8fd8b3757f2868fa50e195ff1ab3284da50a3200c32fae02932",
    ),
    (
        "faust.tables.recovery.Recovery._add",
        "tables.py",
        "1584a197b11bf835c0e3c497952413ce5a5f13078fdd88a9dcfd60ea1e125fa6",
    ),
    (
        "faust.tables.recovery.Recovery._seek_offsets",
        "tables.py",
        "19598ca63d94d250e49d2dfe48a3c48ecbdf65ee4f1a2871abda51d28b335e55",
    ),
    (
        "faust.assignor.PartitionAssignor.assigned_actives",
        "tables.py",
        "cd131e5935099dda148d7e894332cc62fe94493bc99f86f42c4936daf4b6b3b5",
    ),
    (
        "faust.Worker._on_sigint",
        "worker.py",
        "327193230c65ea83db83983b7a0a5f983e1658e3f4271a506838d96f507283f1",
    ),
    (
        "faust.Worker._on_sigterm",
        "worker.py",
        "ba99cf23ea875c02ec56789188908e790bfa29ed6c8b7021e1ce939ade9c56b6",
    ),
    (
        "faust.Worker._schedule_shutdown",
        "worker.py",
        "1a6a5dfc88c2298b7ddc84be024a4344a54eaca8ba3a2d39e0447fa5b3905aa4",
    ),
    (
        "faust.Worker.on_startup_finished",
        "worker.py",
        "60faa1ca4af75221cecc81811e282f6583574bbcb74c9cc8ef30ff237e1c4308",
    ),
    (
        "faust.transport.drivers.aiokafka.Consumer.__init__",
        "clients.py",
        "7072ae80eac1ff62b52ce9503a8fe7b6ff44fbb390b8f6beba7161b31b8bb483",
    ),
    (
        "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.on_start",
        "clients.py",
        "38b4e8bd1e10723aed02bb1e8c74ccb02a0b04dec35b9001c51f45fa7f2b611c",
    ),
    (
        "aiokafka.AIOKafkaConsumer.__init__",
        "clients.py",
        "01506f316191f7c99c785bec915756d1560029a6fad75cba6f4da71e343a8163",
    ),
    (
        "aiokafka.consumer.fetcher.Fetcher._proc_offset_request",
        "clients.py",
        "40c09472da94d88c35bdbd30c44cc3a09cfe5f5fb7cfd3d336013a015e77b91d",
    ),
    (
        "aiokafka.AIOKafkaClient.send",
        "clients.py",
        "246b277687d7b687d79fd81f0a9718633b61a5ead0a1e9898419a1151ae3a91d",
    ),
)
"""(upstream name, as reached from the class eyrie subclasses or the module it uses; the file of
streams/faust_overrides/ that overrides it or depends on it; sha256 of its source at the pinned version)."""


def resolve(name: str) -> Any:
    """The object a dotted name reaches: the longest importable module, then attributes (through the MRO,
    so an inherited method is the one eyrie's subclass actually overrides)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise LookupError(name)


@pytest.mark.parametrize(("name", "override", "digest"), CANARIES, ids=[name for name, _, _ in CANARIES])
def test_upstream_code_an_override_depends_on_is_unchanged(name: str, override: str, digest: str) -> None:
    distribution = DISTRIBUTIONS[name.split(".", 1)[0]]
    release = f"{distribution} {version(distribution)}"
    try:
        source = inspect.getsource(resolve(name))
    except (AttributeError, LookupError):
        pytest.fail(f"{release} has no {name}, which streams/faust_overrides/{override} overrides")
    assert hashlib.sha256(source.encode()).hexdigest() == digest, (
        f"{release} changed {name}, which streams/faust_overrides/{override} overrides: "
        "re-check the override and update the hash"
    )


def test_every_canary_names_a_file_of_the_overrides() -> None:
    assert {override for _, override, _ in CANARIES} <= {path.name for path in OVERRIDES.glob("*.py")}


def test_the_overrides_docstring_names_every_override_file_and_this_test() -> None:
    doc = streams.faust_overrides.__doc__ or ""
    assert "tests/streams/test_faust_canaries.py" in doc
    for path in OVERRIDES.glob("*.py"):
        if path.name != "__init__.py":
            assert path.name in doc, path.name
