"""SDK tests left out of the drop-in check, each with its reason.

Keys are ``file::test`` (every parametrisation), ``file::test[param]``, or ``file::*`` (the
whole file). ``EXCLUDED``: tests that inspect the SDK's private attributes or helpers, its
storage layout, its Fernet envelope format or its message wording. ``DIFFERENCES``: tests that
hit a deliberate difference listed with its reason in docs/sdk-differences.md. A real
difference that is not deliberate is fixed, not listed.
"""

# ruff: noqa: E501  (test ids are data)
from __future__ import annotations

_PRIVATE = "inspects the SDK's private attribute or helper "
_FERNET = "reads the SDK's Fernet envelope ({'__enc__': 1, 'payload': ...}) or its cipher"
_GATE = (
    "patches asyncio.to_thread in the SDK's module to park its private worker function (e.g. "
    "_pop_item_sync) and then waits for that worker to start; ours dispatches no such "
    "function, so the wait never ends (the hang this file showed). Each object here runs one "
    "operation at a time (an asyncio lock), so the interleavings it forces cannot occur"
)
_LAYOUT = (
    "reads the SDK's message_structure/turn_usage/branch tables (its storage layout) through "
    "its private _locked_connection; the behaviour is checked in tests/test_branching.py"
)
_SECOND_PAIR = (
    "a second sessions/messages table pair in one file: the SDK refuses it because its "
    "branch tables are shared per file; here each pair keeps its own branch and usage data, "
    "so it is accepted (docs/sdk-differences.md)"
)
_BACKDATE = (
    _PRIVATE + "_messages (its table object) to backdate a stored row's created_at; ours has no "
    "such column and orders by sequence number only, so no timestamp can reorder a history"
)
_WORDING = "matches the SDK's message wording naming its own class"
_EXACT = (
    "matches the SDK's whole message (^...$); ours raises the same type with a longer message "
    "naming the session (closed) or the type it got (session_id)"
)
_FAKE = (
    "inspects the file's in-process fake client (the stand-in here is mongomock-motor or a "
    "real server, which have no such attribute): "
)
_MONGO_LAYOUT = (
    "reads or writes documents in the SDK's MongoDB layout (message_data per item or batch, "
    "a sessions document with _seq/_generation); ours stores one {seq, n, items} document "
    "per batch (docs/mongodb.md): "
)
_OVERLAP = (
    "an operation that overlaps a clear_session (it started before the clear and ends after "
    "it) takes effect after the clear here, before it in the SDK (its generation counter); "
    "both are linearizable, and a clear that completes before an operation starts always "
    "wins (docs/sdk-differences.md)"
)

_REDIS_KEYS = (
    "reads or writes the SDK's Redis keys (agents:session:<id>, :messages, :counter) directly; "
    "ours keeps a session under <prefix>:{<id>}:items/:meta (docs/redis.md); the SDK's data "
    "is opened with the SDK's class through sdk+redis:// URLs or migrated (docs/sdk-layouts.md): "
)
_REDIS_COLLIDE = (
    "needs two session ids whose keys collide in the SDK's layout ('conversation' and "
    "'conversation:messages' or ':counter'), expecting WRONGTYPE; ours brace-encloses the id, so "
    "no two ids share a key (docs/redis.md) and both sessions work; also reads "
)
_REDIS_PIPELINE = (
    "instruments the SDK's WATCH/MULTI write (patches client.pipeline() and its execute/watch/"
    "time, counts its pipelines or retries); ours writes in one Lua script (EVALSHA), so there "
    "is no pipeline and no WATCH retry"
)
_REDIS_POOL = (
    "drives the SDK's own connection checkout for its WATCH transaction: it patches the pool's "
    "ensure_connection/release/disconnect or its release listeners, or the SDK's private "
    "_redis_connection_api, and waits for or counts those steps. Ours sends each operation as "
    "one command through redis-py's ordinary path, which checks the connection out and in "
    "itself (so the waits never end, the counts differ, and a failure injected into redis-py's "
    "release reaches the caller as redis-py raises it)"
)

EXCLUDED: dict[str, str] = {
    # tests/memory/test_session.py (SQLiteSession)
    "test_session.py::test_await_mutation_cancellation_hides_later_failure_without_loop_error": (
        "tests the SDK's private helper _await_mutation, not a session"
    ),
    "test_session.py::test_sqlite_session_close_closes_worker_thread_connections": _PRIVATE
    + "_connections",
    "test_session.py::test_sqlite_session_close_retries_quarantined_connection": _PRIVATE
    + "_connections_lock",
    "test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        _PRIVATE + "_connections"
    ),
    "test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": (
        "writes the SDK's sessions table with raw sqlite3 right after construction; ours creates "
        "its tables on first use and refuses the bad item before any transaction"
    ),
    "test_session.py::test_sqlite_session_failed_clear_session_rolls_back": _PRIVATE
    + "_connections",
    "test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": _PRIVATE
    + "_connections",
    "test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": _PRIVATE + "_lock",
    "test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _PRIVATE
    + "_locked_connection",
    "test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        _PRIVATE + "_locked_connection"
    ),
    "test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": _PRIVATE
    + "_connections",
    "test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        _PRIVATE + "_locked_connection"
    ),
    "test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": _PRIVATE
    + "_locked_connection",
    "test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        _PRIVATE + "_connections_lock"
    ),
    "test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": _PRIVATE
    + "_connections",
    "test_session.py::test_sqlite_session_rollback_failure_evicts_connection": _PRIVATE
    + "_connections_lock",
    # tests/memory/test_sqlalchemy_compaction.py
    "test_sqlalchemy_compaction.py::test_cancelled_replacement_settles_before_other_instance_append": (
        _PRIVATE + "_session_factory"
    ),
    "test_sqlalchemy_compaction.py::test_failed_replacement_preserves_history_during_other_instance_access": (
        _PRIVATE + "_session_factory"
    ),
    "test_sqlalchemy_compaction.py::test_replacement_uses_timestamp_order_not_id_order": _PRIVATE
    + "_messages (its table object)",
    "test_sqlalchemy_compaction.py::test_replacement_includes_backdated_append_in_visible_suffix": (
        _BACKDATE
    ),
    "test_sqlalchemy_compaction.py::test_encrypted_prefix_cleanup_is_atomic": _BACKDATE
    + "; with reject_insert=True it also injects its failure through SQLAlchemy's "
    "before_cursor_execute event, which ours does not fire (it talks to the driver connection)",
    # tests/extensions/memory/test_sqlalchemy_session.py
    "test_sqlalchemy_session.py::test_add_items_cancelled_waiter_does_not_strand_table_init_lock": (
        _PRIVATE + "_init_lock"
    ),
    "test_sqlalchemy_session.py::test_create_tables_false_does_not_allocate_shared_init_lock": (
        _PRIVATE + "_table_init_locks"
    ),
    "test_sqlalchemy_session.py::test_get_items_limit_skips_corrupt_newest_rows": _PRIVATE
    + "_ensure_tables",
    "test_sqlalchemy_session.py::test_get_items_orders_by_id_for_ties": _PRIVATE
    + "_session_factory",
    "test_sqlalchemy_session.py::test_backdated_append_remains_the_latest_item": _BACKDATE,
    "test_sqlalchemy_session.py::test_get_items_same_timestamp_consistent_order": _PRIVATE
    + "_session_factory",
    "test_sqlalchemy_session.py::test_mutation_cancellation_waits_for_transaction_exit": _PRIVATE
    + "_ensure_tables",
    "test_sqlalchemy_session.py::test_pop_item_retries_returning_claim_lost_to_concurrent_delete": (
        _PRIVATE + "_ensure_tables"
    ),
    "test_sqlalchemy_session.py::test_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        _PRIVATE + "_ensure_tables"
    ),
    "test_sqlalchemy_session.py::test_pop_item_same_timestamp_returns_latest": _PRIVATE
    + "_session_factory",
    "test_sqlalchemy_session.py::test_pop_item_skips_corrupt_most_recent": _PRIVATE
    + "_ensure_tables",
    "test_sqlalchemy_session.py::test_pop_item_supports_unknown_delete_rowcount": _PRIVATE
    + "_ensure_tables",
    "test_sqlalchemy_session.py::test_sqlalchemy_session_can_store_non_ascii_without_escaping": (
        _PRIVATE + "_session_factory (to read its raw rows)"
    ),
    "test_sqlalchemy_session.py::test_sqlalchemy_session_defaults_to_escaped_non_ascii_storage": (
        _PRIVATE + "_session_factory (and its escaped storage)"
    ),
    "test_sqlalchemy_session.py::test_sqlite_configuration_registry_does_not_grow_unbounded": (
        _PRIVATE + "_sqlite_configured_engines"
    ),
    "test_sqlalchemy_session.py::test_sqlite_configuration_registry_releases_collected_engines": (
        _PRIVATE + "_sqlite_configured_engines"
    ),
    "test_sqlalchemy_session.py::test_sqlite_fallback_reserves_writer_before_tail_claim": (
        "asserts the SDK's SQL statements (an UPDATE of its sessions table) through SQLAlchemy "
        "cursor events"
    ),
    # tests/extensions/memory/test_redis_session.py
    "test_redis_session.py::test_add_items_preserves_created_at_metadata": _PRIVATE + "_redis",
    "test_redis_session.py::test_add_items_uses_server_absolute_expiration_after_serialization": (
        _PRIVATE + "_serialize_item and patches the client's pipeline().time() (ours reads the "
        "server clock inside its script); the ttl it uses is accepted, see "
        "tests/test_redis.py::test_ttl_reaches_the_end_of_redis_expiry_range"
    ),
    "test_redis_session.py::test_atomic_replacement_preserves_clear_add_metadata": _PRIVATE
    + "_redis",
    "test_redis_session.py::test_atomic_replacement_rejects_colliding_counter_key": _PRIVATE
    + "_redis",
    "test_redis_session.py::test_cancelled_redis_compaction_handoff_remains_resumable": _PRIVATE
    + "_redis",
    "test_redis_session.py::test_compaction_cancel_after_redis_commit_invalidates_cached_history": (
        _PRIVATE + "_redis"
    ),
    "test_redis_session.py::test_compaction_replaces_redis_history_atomically": _PRIVATE + "_redis",
    "test_redis_session.py::test_compaction_subclass_retains_overridden_storage_methods": _PRIVATE
    + "_redis",
    "test_redis_session.py::test_get_next_id_method": _PRIVATE + "_get_next_id",
    "test_redis_session.py::test_internal_client_ownership": _PRIVATE
    + "_owns_client (and reuses a fixed id without clearing it)",
    "test_redis_session.py::test_mutation_cancellation_waits_for_authoritative_outcome": _PRIVATE
    + "_redis",
    "test_redis_session.py::test_redis_compaction_preserves_encryption_wrapper": _FERNET,
    # ... and those that build fakeredis clients (run on target redis-fake)
    "test_redis_session.py::test_redis_cluster_reads_and_subclass_writes": _REDIS_KEYS
    + "it patches a RedisCluster's lrange/rpop/rpush/delete (ours runs scripts) and its "
    "subclass writes through the SDK's private _redis/_messages_key",
    "test_redis_session.py::test_released_redis_layout_remains_usable": _REDIS_KEYS
    + "it writes a v0.22.3 SDK session by hand and reads it back",
    "test_redis_session.py::test_get_items_limit_skips_corrupt_newest_messages": _REDIS_KEYS
    + "injects corrupt JSON through the SDK's private _messages_key",
    "test_redis_session.py::test_corrupted_data_handling": _REDIS_KEYS
    + "injects corrupt JSON through the SDK's private _messages_key",
    "test_redis_session.py::test_add_items_rejects_wrong_metadata_key_type_before_writing": (
        _REDIS_KEYS + "sets the SDK's private _session_key to a string (ours refuses a foreign "
        "type in its own keys with BackendDataError, writing nothing; tests/test_redis.py)"
    ),
    "test_redis_session.py::test_colliding_session_clear_preserves_existing_session": (
        _REDIS_COLLIDE + "the SDK's private _session_key"
    ),
    "test_redis_session.py::test_colliding_counter_rejects_ttl_write_before_side_effects": (
        _REDIS_COLLIDE + "the SDK's private _session_key"
    ),
    "test_redis_session.py::test_clear_rechecks_key_types_after_concurrent_replacement": (
        _REDIS_COLLIDE + "nothing private, but " + _REDIS_PIPELINE
    ),
    "test_redis_session.py::test_add_items_applies_ttl_in_the_write_transaction": _REDIS_PIPELINE,
    "test_redis_session.py::test_add_items_refreshes_server_timestamps_after_watch_retry": (
        _REDIS_PIPELINE
    ),
    "test_redis_session.py::test_ambiguous_exec_watch_error_is_not_retried": _REDIS_PIPELINE,
    "test_redis_session.py::test_add_items_rejects_unrepresentable_ttl_before_writing": (
        "matches the SDK's message wording ('outside Redis's supported expiration range'); ours "
        "raises the same ValueError, writing nothing, worded 'past the end of Redis's expiry "
        "range' (tests/test_redis.py::test_ttl_reaches_the_end_of_redis_expiry_range)"
    ),
    "test_redis_session.py::test_close_method_coverage": _PRIVATE + "_owns_client",
    "test_redis_session.py::test_redis_session_close_is_noop_for_injected_client": _PRIVATE
    + "_owns_client",
    "test_redis_session.py::test_redis_session_closed_operations_raise_runtime_error": _PRIVATE
    + "_owns_client",
    "test_redis_session.py::test_ping_connection_failure": _PRIVATE + "_redis (patches its ping)",
    "test_redis_session.py::test_redis_session_failed_cleanup_is_terminal_and_retried": _PRIVATE
    + "_redis (patches its aclose)",
    "test_redis_session.py::test_redis_session_cancelled_cleanup_is_terminal_and_retried": (
        _PRIVATE + "_redis (patches its aclose)"
    ),
    "test_redis_session.py::test_blocking_pool_cancellation_completion_owns_release": _REDIS_POOL,
    "test_redis_session.py::test_blocking_pool_detached_disconnect_notifies_waiter": _REDIS_POOL,
    "test_redis_session.py::test_redis_session_operation_waiting_behind_close_raises": _PRIVATE
    + "_owns_client (and patches the SDK module's redis.from_url, which ours does not call)",
    "test_redis_session.py::test_blocking_pool_listener_failure_notifies_waiter": _REDIS_POOL,
    "test_redis_session.py::test_cancelled_connection_acquisition_is_discarded_before_release": _REDIS_POOL,
    "test_redis_session.py::test_cancelled_in_flight_watch_command_reconnects_before_pool_reuse": _REDIS_POOL,
    "test_redis_session.py::test_cancelled_watch_releases_single_connection_pool": _REDIS_POOL,
    "test_redis_session.py::test_ordinary_pool_cancellation_completion_owns_release": _REDIS_POOL,
    "test_redis_session.py::test_post_commit_cancellation_propagates_after_cleanup": _REDIS_POOL,
    "test_redis_session.py::test_post_commit_detached_close_failure_is_quarantined": _REDIS_POOL,
    "test_redis_session.py::test_post_commit_release_listener_failure_does_not_retry": _REDIS_POOL,
    "test_redis_session.py::test_post_commit_reset_failure_detaches_without_release_listener": _REDIS_POOL,
    "test_redis_session.py::test_pre_exec_cancellation_skips_pipeline_reset": _REDIS_POOL,
    "test_redis_session.py::test_pre_exec_close_failure_is_quarantined": _REDIS_POOL,
    "test_redis_session.py::test_reconnect_marked_inside_release_failure_is_detached": _REDIS_POOL,
    "test_redis_session.py::test_reconnect_required_release_detaches_without_listener_reborrow": _REDIS_POOL,
    "test_redis_session.py::test_redis8_blocking_pool_checkout_preserves_native_timing": _REDIS_POOL,
    "test_redis_session.py::test_release_failure_after_reborrow_preserves_new_borrower": _REDIS_POOL,
    # tests/extensions/memory/test_encrypt_session.py
    "test_encrypt_session.py::test_encrypted_session_basic_functionality": _FERNET,
    "test_encrypt_session.py::test_clear_revokes_encrypted_deferred_compaction": _FERNET,
    "test_encrypt_session.py::test_compaction_wrapping_encrypted_storage": _FERNET,
    "test_encrypt_session.py::test_encrypted_compaction_replaces_complete_logical_history_after_expiry": (
        _FERNET
    ),
    "test_encrypt_session.py::test_encrypted_compaction_skips_unencrypted_stored_history": _FERNET,
    "test_encrypt_session.py::test_encrypted_runner_skips_compaction_after_interleaved_outer_write": (
        _FERNET
    ),
    "test_encrypt_session.py::test_encrypted_session_preserves_optional_compaction_delegation": (
        _FERNET
    ),
    "test_encrypt_session.py::test_runner_encrypts_items_around_compaction": _FERNET,
    "test_encrypt_session.py::test_runner_recovers_encrypted_resumed_append": _FERNET,
    "test_encrypt_session.py::test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations": (
        _FERNET + " (patches cipher.extract_timestamp)"
    ),
    "test_encrypt_session.py::test_encrypted_pop_cancellation_waits_for_authentication_rollback": (
        _FERNET + " (patches cipher.extract_timestamp)"
    ),
    "test_encrypt_session.py::test_encrypted_session_scan_budget_counts_overlapping_expired_windows": (
        _PRIVATE + "_unwrap"
    ),
    "test_encrypt_session.py::test_encrypted_compaction_restores_original_tokens_before_concurrent_append": (
        "pauses the SDK SQLiteSession subclass's private replacement path; the swap here is one "
        "transaction, so the concurrent append it waits for never gets between"
    ),
    # tests/extensions/memory/test_async_sqlite_session.py (AsyncSQLiteSession = SQLiteSession)
    "test_async_sqlite_session.py::test_async_sqlite_session_close_before_use_is_terminal": _WORDING,
    "test_async_sqlite_session.py::test_async_sqlite_session_close_is_idempotent": _WORDING,
    "test_async_sqlite_session.py::test_async_sqlite_session_closed_operations_raise_runtime_error": (
        _WORDING
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_closed_rejects_empty_add_items": (
        _WORDING
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_get_items_same_timestamp_consistent_order": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_pop_item_same_timestamp_returns_latest": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_async_sqlite_session_pop_item_skips_corrupt_most_recent": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_cancelled_add_items_rolls_back_write_transaction": _PRIVATE
    + "_get_connection",
    "test_async_sqlite_session.py::test_cancelled_close_finishes_cleanup_and_propagates_cancellation": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_cancelled_connect_closes_eventually_acquired_connection": (
        "patches aiosqlite.connect, which the SDK's class calls; ours runs sqlite3 on its own "
        "worker thread (docs/sqlite.md)"
    ),
    "test_async_sqlite_session.py::test_cancelled_initialization_finishes_candidate_close": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_cancelled_wal_retry_closes_startup_connection": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_close_retries_connection_quarantined_after_rollback_failure": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_close_retries_quarantined_failed_initialization_candidate": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_failed_add_items_rolls_back_and_reuses_connection": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_failed_clear_session_rolls_back": _PRIVATE
    + "_get_connection",
    "test_async_sqlite_session.py::test_failed_initialization_closes_candidate_connection": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_failed_pop_item_releases_write_lock": _PRIVATE
    + "_get_connection",
    "test_async_sqlite_session.py::test_initialization_does_not_retry_unrecoverable_wal_errors": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_initialization_failure_then_cancellation_during_candidate_close": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_initialization_retries_transient_wal_lock": (
        "patches aiosqlite.connect (see above)"
    ),
    "test_async_sqlite_session.py::test_operation_failure_then_cancellation_during_rollback": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_post_commit_cancellation_propagates_after_known_mutation_outcome": (
        _PRIVATE + "_get_connection"
    ),
    "test_async_sqlite_session.py::test_rollback_failure_closes_and_evicts_connection": _PRIVATE
    + "_get_connection",
    # tests/extensions/memory/test_advanced_sqlite_session.py (AdvancedSQLiteSession)
    "test_advanced_sqlite_session.py::test_pop_item_uses_branch_snapshot_when_branch_switches_concurrently": _GATE,
    "test_advanced_sqlite_session.py::test_stale_switch_after_clear_does_not_repoint_to_deleted_branch": _GATE,
    "test_advanced_sqlite_session.py::test_stale_create_branch_after_clear_does_not_repoint": _GATE,
    "test_advanced_sqlite_session.py::test_clear_before_branch_transaction_prevents_stale_reservation": _GATE,
    "test_advanced_sqlite_session.py::test_store_run_usage_cancellation_during_capture_waits_for_commit": _GATE,
    "test_advanced_sqlite_session.py::test_store_run_usage_keeps_target_while_capture_is_waiting": _GATE,
    "test_advanced_sqlite_session.py::test_store_run_usage_keeps_turn_when_history_changes_during_capture": _GATE,
    "test_advanced_sqlite_session.py::test_queued_add_keeps_selected_branch": _GATE,
    "test_advanced_sqlite_session.py::test_queued_append_cannot_resurrect_deleted_branch": _GATE,
    "test_advanced_sqlite_session.py::test_queued_turn_mutation_releases_later_usage_capture": _GATE,
    "test_advanced_sqlite_session.py::test_turn_ordering_survives_reuse_on_another_event_loop": _GATE,
    "test_advanced_sqlite_session.py::test_stale_store_run_usage_skipped_when_turn_removed_by_pop": _GATE,
    "test_advanced_sqlite_session.py::test_stale_store_run_usage_not_recorded_against_reused_turn_number": _GATE,
    "test_advanced_sqlite_session.py::test_store_run_usage_survives_unrelated_branch_deletion": _GATE,
    "test_advanced_sqlite_session.py::test_add_items_rolls_back_messages_when_structure_metadata_fails": _LAYOUT,
    "test_advanced_sqlite_session.py::test_add_items_can_retry_after_structure_metadata_failure": _LAYOUT,
    "test_advanced_sqlite_session.py::test_add_items_failure_preserves_existing_history": _LAYOUT,
    "test_advanced_sqlite_session.py::test_add_items_rolls_back_partial_structure_metadata_write": _LAYOUT,
    "test_advanced_sqlite_session.py::test_branch_reservations_migrate_existing_populated_branches": _LAYOUT,
    "test_advanced_sqlite_session.py::test_legacy_branch_ids_are_backfilled_before_destructive_operations": _LAYOUT,
    "test_advanced_sqlite_session.py::test_legacy_destructive_noops_leave_database_unlocked": _LAYOUT,
    "test_advanced_sqlite_session.py::test_delete_branch_removes_branch_only_messages": _LAYOUT,
    "test_advanced_sqlite_session.py::test_delete_branch_keeps_messages_still_referenced_by_another_branch": _LAYOUT,
    "test_advanced_sqlite_session.py::test_orphan_cleanup_uses_set_based_delete_for_many_messages": _LAYOUT,
    "test_advanced_sqlite_session.py::test_concurrent_add_items_preserves_message_structure_for_file_db": _LAYOUT,
    "test_advanced_sqlite_session.py::test_clear_session_removes_structure_and_usage_metadata": _LAYOUT,
    "test_advanced_sqlite_session.py::test_pop_item_removes_its_structure_row": _LAYOUT,
    "test_advanced_sqlite_session.py::test_pop_item_removes_turn_usage_only_when_turn_emptied": _LAYOUT,
    "test_advanced_sqlite_session.py::test_pop_item_respects_current_branch_and_keeps_shared_messages": _LAYOUT,
    "test_advanced_sqlite_session.py::test_pop_item_deletes_shared_copied_message_only_when_unreferenced": _LAYOUT,
    "test_advanced_sqlite_session.py::test_default_read_does_not_initialize_clear_generation_table": _LAYOUT,
    "test_advanced_sqlite_session.py::test_pop_item_rolls_back_on_failure_after_earlier_delete": _LAYOUT,
    "test_advanced_sqlite_session.py::test_clear_session_rolls_back_on_failure_after_earlier_delete": _LAYOUT,
    "test_advanced_sqlite_session.py::test_store_run_usage_skips_when_current_branch_has_no_turn": _LAYOUT,
    "test_advanced_sqlite_session.py::test_clear_session_resets_current_branch_to_main": _LAYOUT,
    "test_advanced_sqlite_session.py::test_advanced_session_respects_custom_table_names": _PRIVATE
    + "_get_connection (to read the foreign keys of its message_structure/turn_usage tables)",
    "test_advanced_sqlite_session.py::test_add_items_rollback_failure_invalidates_connection": _PRIVATE
    + "_connections and _insert_structure_metadata",
    "test_advanced_sqlite_session.py::test_post_commit_cancellation_propagates_after_known_mutation_outcome": _PRIVATE
    + "_connections_lock",
    "test_advanced_sqlite_session.py::test_auxiliary_mutation_cancellation_waits_for_commit": _PRIVATE
    + "_write_connection and _insert_items",
    "test_advanced_sqlite_session.py::test_failed_branch_reservation_rolls_back_and_allows_retry": _PRIVATE
    + "_reserve_branch_id and _locked_connection",
    "test_advanced_sqlite_session.py::test_failed_usage_write_rolls_back_cached_connection": _PRIVATE
    + "_get_connection",
    "test_advanced_sqlite_session.py::test_get_items_limit_skips_corrupt_newest_rows": _PRIVATE
    + "_get_connection (writes corrupt rows into its tables)",
    "test_advanced_sqlite_session.py::test_switch_validation_cancellation_waits_for_generation_commit": _PRIVATE
    + "_write_connection",
    "test_advanced_sqlite_session.py::test_store_run_usage_waits_for_database_lock_off_event_loop": _PRIVATE
    + "_lock (holds the SDK's threading lock)",
    "test_advanced_sqlite_session.py::test_identifier_resolution_leaves_connection_authorized": _PRIVATE
    + "_resolve_table_identifier",
    "test_advanced_sqlite_session.py::test_branch_allocation_is_serialized_across_processes": _PRIVATE
    + "_reserve_branch_id (patched in each child process)",
    "test_advanced_sqlite_session.py::test_structure_initialization_failure_invalidates_connection": (
        "drops and replaces the SDK's branch_reservations table and idx_structure_session_seq "
        "index (storage layout)"
    ),
    "test_advanced_sqlite_session.py::test_structure_tables_reject_an_ownerless_layout": "builds the SDK's message_structure/turn_usage tables by hand (storage layout)",
    "test_advanced_sqlite_session.py::test_structure_tables_reject_malformed_owner_layouts": "builds the SDK's message_structure/turn_usage tables by hand (storage layout)",
    "test_advanced_sqlite_session.py::test_structure_tables_accept_equivalent_child_column_casing": "builds the SDK's message_structure/turn_usage tables by hand (storage layout)",
    "test_advanced_sqlite_session.py::test_no_create_session_rejects_owner_metadata_without_base_tables": "builds the SDK's message_structure/turn_usage tables by hand (storage layout)",
    "test_advanced_sqlite_session.py::test_tool_usage_reads_legacy_shell_and_patch_names": (
        "writes rows into the SDK's message_structure table by hand (storage layout)"
    ),
    "test_advanced_sqlite_session.py::test_usage_tracking_failure_identity_follows_model_data_policy": _PRIVATE
    + "_update_turn_usage_internal (patched to fail)",
    "test_advanced_sqlite_session.py::test_add_captures_coherent_branch_after_clear_publication": _PRIVATE
    + "_generation/_branch_state (pauses their assignment in __setattr__)",
    "test_advanced_sqlite_session.py::test_concurrent_structure_table_claims_leave_one_coherent_owner": (
        "reads the foreign keys of the SDK's message_structure/turn_usage tables (storage layout)"
    ),
    "test_advanced_sqlite_session.py::test_external_clear_resets_stale_branch_before_default_reads[usage]": (
        "fails with the SDK's own class too: the installed openai's InputTokensDetails has a "
        "cache_write_tokens_details field the test's expected dict lacks (the other "
        "parametrisations pass)"
    ),
    # tests/extensions/memory/test_mongodb_session.py (FakeAsyncMongoClient -> mongomock-motor
    # or a real server, see sdk_swap._mongodb_target)
    "test_mongodb_session.py::test_constructor_rejects_non_string_session_id": _EXACT
    + "; and "
    + _FAKE
    + "_metadata_calls, _databases, _closed",
    "test_mongodb_session.py::test_from_uri_rejects_non_string_session_id_before_client_creation": (
        _EXACT + " (the client is not created here either)"
    ),
    "test_mongodb_session.py::test_close_before_use_is_terminal": _EXACT,
    "test_mongodb_session.py::test_closed_operations_raise_runtime_error": _EXACT,
    "test_mongodb_session.py::test_closed_rejects_empty_add_items": _EXACT,
    "test_mongodb_session.py::test_ping_on_closed_session_raises": _EXACT,
    "test_mongodb_session.py::test_repeated_close_remains_safe": _EXACT,
    "test_mongodb_session.py::test_injected_client_receives_append_metadata": _FAKE
    + "_metadata_calls",
    "test_mongodb_session.py::test_concurrent_pop_item_claims_distinct_items_from_batch": _FAKE
    + "_docs (after the pops, which return distinct items here too)",
    "test_mongodb_session.py::test_pop_item_deletes_exhausted_batch_document": _FAKE + "_docs",
    "test_mongodb_session.py::test_pop_item_cancellation_waits_for_exhausted_batch_cleanup": _FAKE
    + "_docs (after the cancellation, which waits here too)",
    "test_mongodb_session.py::test_close_owned_client_is_closed": _PRIVATE
    + "_owns_client; and "
    + _FAKE
    + "_closed",
    "test_mongodb_session.py::test_close_external_client_not_closed": _PRIVATE
    + "_owns_client; and "
    + _FAKE
    + "_closed",
    "test_mongodb_session.py::test_external_client_session_stays_usable_after_close": _PRIVATE
    + "_owns_client (tests/test_mongodb.py::test_injected_client_stays_open_after_close)",
    "test_mongodb_session.py::test_failed_close_is_terminal_and_can_be_retried": _PRIVATE
    + "_client (patches its close; tests/test_mongodb.py::"
    "test_a_failed_close_of_the_owned_client_is_terminal_and_retried checks the same)",
    "test_mongodb_session.py::test_cancelled_close_is_terminal_and_can_be_retried": _PRIVATE
    + "_client (patches its close; tests/test_mongodb.py::"
    "test_a_failed_close_of_the_owned_client_is_terminal_and_retried checks the same)",
    "test_mongodb_session.py::test_ping_failure": _PRIVATE
    + "_client (tests/test_mongodb.py pings an unreachable server)",
    "test_mongodb_session.py::test_index_creation_runs_only_once": _PRIVATE
    + "_sessions and _ensure_indexes",
    "test_mongodb_session.py::test_different_clients_each_run_index_init": _PRIVATE
    + "_sessions and _ensure_indexes",
    "test_mongodb_session.py::test_add_items_serializes_before_reserving_sequence_numbers": (
        _PRIVATE + "_serialize_item (overridden to fail; ours never calls it) and _sessions"
    ),
    "test_mongodb_session.py::test_clear_session": _MONGO_LAYOUT + "_seq, _generation",
    "test_mongodb_session.py::test_clear_session_partial_cleanup_failure_is_logically_atomic": (
        _MONGO_LAYOUT + "a failed sweep after its generation advanced"
    ),
    "test_mongodb_session.py::test_generation_reads_use_primary_after_failed_clear_cleanup": (
        _MONGO_LAYOUT + "a stale _generation on a secondary"
    ),
    "test_mongodb_session.py::test_session_metadata_timestamps_are_written": _MONGO_LAYOUT
    + "its sessions document (and patches the SDK module's datetime)",
    "test_mongodb_session.py::test_corrupted_document_is_skipped": _MONGO_LAYOUT
    + "injected message_data",
    "test_mongodb_session.py::test_missing_message_data_field_is_skipped": _MONGO_LAYOUT
    + "injected document",
    "test_mongodb_session.py::test_non_string_message_data_is_skipped": _MONGO_LAYOUT
    + "injected message_data",
    "test_mongodb_session.py::test_get_items_limit_skips_corrupt_newest_docs": _MONGO_LAYOUT
    + "injected message_data",
    "test_mongodb_session.py::test_pop_item_skips_corrupt_most_recent": _MONGO_LAYOUT
    + "injected message_data",
    "test_mongodb_session.py::test_pop_item_returns_none_when_only_corrupt_docs_remain": (
        _MONGO_LAYOUT + "injected message_data"
    ),
    "test_mongodb_session.py::test_pop_item_cleanup_failure_does_not_hide_known_claim": (
        _MONGO_LAYOUT + "an emptied batch's message_data == []"
    ),
    "test_mongodb_session.py::test_reads_legacy_item_documents_with_new_batch_documents": (
        _MONGO_LAYOUT + "its legacy per-item documents"
    ),
}

OLDER_RELEASES = {
    "test_sqlalchemy_compaction.py::test_replacement_uses_timestamp_order_not_id_order",
    "test_sqlalchemy_session.py::test_get_items_orders_by_id_for_ties",
}
"""Keys above naming tests that only SDK releases before the pinned one have (0.24 had these; the
oldest release pyproject.toml allows still runs them): not reported unused on the pinned one."""

DIFFERENCES: dict[str, str] = {
    "test_mongodb_session.py::test_string_session_ids_remain_literal_and_isolated[]": (
        "an empty session id is refused here with InvalidSessionIdError (a ValueError) on every "
        "store (docs/sdk-differences.md); the other ids of this test pass"
    ),
    "test_mongodb_session.py::test_from_uri_passes_driver_info_to_constructor": (
        "from_uri passes a DriverInfo, named agent_sessions here: the handshake names the "
        "library that talks to the server, not the SDK (docs/sdk-differences.md)"
    ),
    "test_mongodb_session.py::test_clear_session_hides_add_reserved_before_generation_advance": (
        _OVERLAP
    ),
    "test_mongodb_session.py::test_pop_rechecks_generation_after_concurrent_clear": _OVERLAP,
    "test_encrypt_session.py::test_encrypted_session_scan_budget_rejects_negative_limit_before_read": (
        "limit=-1 without a budget: SQLite's LIMIT -1 returns every item in the SDK; here a "
        "limit <= 0 returns [] on every store (docs/sdk-differences.md)"
    ),
    "test_encrypt_session.py::test_encrypted_session_scan_budget_accepts_short_empty_and_zero_reads": (
        "asserts the SDK forwards a 0-limit read; here limit 0 returns [] without reading"
    ),
    "test_advanced_sqlite_session.py::test_failed_force_delete_keeps_current_branch": (
        "a branch exists from its creation here (listed, switchable, deletable) even before it "
        "holds an item of its own; in the SDK a branch without message rows does not exist, so "
        "force-deleting it raises. Failed forced deletes here raise the same ValueError and "
        "change nothing (tests/test_branching.py)"
    ),
    "test_advanced_sqlite_session.py::test_structure_tables_reject_a_second_base_table_pair": _SECOND_PAIR,
    "test_advanced_sqlite_session.py::test_structure_tables_reject_changed_sessions_with_shared_messages": _SECOND_PAIR,
    "test_advanced_sqlite_session.py::test_structure_tables_reject_changed_messages_with_shared_sessions": _SECOND_PAIR,
    "test_advanced_sqlite_session.py::test_structure_tables_reject_distinct_non_ascii_identifiers": (
        "uses non-ASCII table names: here table names are plain ASCII identifiers (optionally "
        "quoted), refused otherwise; and a second pair would be accepted (see above)"
    ),
    "test_advanced_sqlite_session.py::test_no_create_session_rejects_a_database_without_an_owner": (
        "create_tables=False on a fresh file: the SDK refuses (its structure tables must be "
        "claimed first); here tables are created on first use and there is nothing to claim"
    ),
    "test_redis_session.py::test_redis_session_rejects_cluster_transactions_before_pipeline": (
        "the SDK refuses a RedisCluster client; ours supports Redis Cluster (docs/redis.md)"
    ),
}

BY_TARGET: dict[str, dict[str, str]] = {
    target: {
        "test_sqlalchemy_compaction.py::test_parent_constraint_rejection_propagates": (
            "creates a SQLite trigger (SQLite syntax) on the server database"
        ),
        "test_sqlalchemy_session.py::test_add_items_waits_for_transient_sqlite_write_lock": (
            "takes a SQLite write lock (BEGIN IMMEDIATE) on the server database"
        ),
    }
    for target in ("postgres", "mariadb")
}
"""Exclusions that apply on one target only (``sqlite``, ``redis``, ``redis-fake``, ``postgres``,
``mariadb``)."""
