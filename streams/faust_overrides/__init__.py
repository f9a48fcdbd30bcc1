"""Every override of private parts of faust-streaming, mode and aiokafka, in one place.

The three libraries are pinned exactly in pyproject.toml, and tests/streams/test_faust_canaries.py hashes
the upstream code each override replaces, copies or reaches into: an upgrade that changes it fails there,
naming the file below to re-check.

- fetching.py: `EyrieApp` (the app, `_new_consumer`) and its Kafka consumer. `_Consumer` carries a copy of
  Faust's fetch loop (`_drain_messages`: skipped offsets read again, records held across a rebalance's
  seek, hand-over inline) and overrides `pause_partitions`, `resume_partitions`, `_commit_tps` (the app's
  `before_commit` and `after_commit` hooks), `on_partitions_assigned`, `perform_seek`, `resume_flow` and
  `seek`.
  `_ConsumerThread` runs Faust's consumer service on the app's loop (`Worker`, `call_thread`,
  `_stopped_set`, `set_shutdown`, `_gather_remaining_tasks`), sets aiokafka's `_fetch_max_wait_ms`
  (`_create_worker_consumer`), and leaves paused partitions out of Faust's livelock checks
  (`verify_event_path`, `verify_recovery_event_path`).
- batching.py: `take_batches`, Faust's `Stream.take_events` rewritten to sleep until its first record, on
  the stream's private `_processors`, `_enable_passive` and `_active_agens`.
- tables.py: `KeyPartitionedTable` (`partition_for_key`, `on_key_set`, `on_key_del`, `_new_store_by_url`:
  partitioned by key, changelog records sent per batch, partitions checkpointed) and its stores, memory and
  RocksDB (`_set`, `_get`, `_contains`, `_del`, on `_db_for_partition` and `_key_index`; `on_rebalance` and
  `persisted_offset`, so that Faust's recovery (`Recovery._add`) reads a changelog from a loaded
  checkpoint's offset on, with `PartitionAssignor.assigned_actives`).
- worker.py: `EyrieWorker`, Faust's worker with eyrie's logging kept, no spinner, and the stopping signal
  remembered (`_schedule_shutdown`, `on_startup_finished`, `_shutdown_immediately`).
- clients.py: reads of the aiokafka client behind a consumer (`_thread`, `_consumer`, `_client`), and the
  first offsets a seek asks for, sent with aiokafka's own request (`Fetcher._proc_offset_request`) on the
  client's coordination connections (`AIOKafkaClient.send`'s `group`).
"""
