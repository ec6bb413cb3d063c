"""Every column of every table has a test against an independent oracle, not only a snapshot.

An oracle is independent when it shares no code with kwsniff: tshark's stored view of the captures
(CAPTURE.tshark.json), dpkt, the real clients' own truth files (CAPTURE.truth.json) and configuration,
kio, kafka-python and Kafka's Java client, or bytes and values a test assembles itself. The golden
digests and `show` excerpts (tests/test_golden_tables.py, tests/test_show.py) are regression guards
that kwsniff wrote; they never count here.

ORACLE_CHECKED names, for each column, one such test (file::function). A new column fails
test_every_column_has_an_independent_check until its line is added. tools/mutate_columns.py checks
the other way round: that a wrong value in each column makes a non-snapshot test fail.

SECTION_CHECKED does the same for the report's sections: the test that holds each section's answer
against pandas written from docs/report.md (tests/test_report_oracles.py), the real clients' record
(tests/test_report_live.py) or values built into its input; never DuckDB against Spark or summaries
against rows (the same SQL twice). tools/mutate_report.py checks that a wrong query in each section
makes one of them fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kwsniff.sections.catalog import SECTIONS
from kwsniff.tables.schemas import SCHEMAS

TESTS = Path(__file__).parent
SNAPSHOTS = {"test_golden_tables.py", "test_show.py"}

RC = "test_read_captures.py::"
TSHARK_EXCHANGES = RC + "test_sizes_times_and_client_ids_of_each_exchange_equal_tsharks"
TSHARK_IDS = RC + "test_correlation_ids_per_connection_equal_tsharks"
TSHARK_STREAMS = RC + "test_connections_carry_what_tsharks_streams_carry"
DPKT_FLOWS = RC + "test_connection_packets_bytes_flags_and_times_equal_dpkts"
EXCHANGE_OF_ROW = RC + "test_every_row_of_an_exchange_carries_its_client_and_times_as_tshark_sees_them"
EXCHANGE_COLUMNS = {
    c: EXCHANGE_OF_ROW for c in ("client_id", "client_ip", "ts_request", "ts_response", "latency_ms")
}
CAPTURE_NAME = RC + "test_every_row_names_its_capture_file"
PT = "test_partitions_table.py::"
FETCH_OFFSETS = PT + "test_fetch_rows_carry_the_offsets_asked_and_answered"
DAMAGE = PT + "test_damaged_record_sets_are_counted_on_their_partition_rows"
BUILT_RECORDS = "test_records_table.py::test_each_record_row_carries_what_the_client_built"
TLS = "test_tls_decrypt.py::"
CAPTURES_ROWS = (
    "test_captures_table.py::test_read_writes_a_captures_row_per_input_and_a_bad_input_fails_alone"
)
UPGRADE = "test_upgrade.py::"
STATS = "test_live_parts.py::test_capture_stats_rows_are_the_periods_and_the_counters_differences"

# Group protocols: kio-encoded exchanges, the kio test coordinator's log, real clients' callbacks.
GW = "test_groups_wire.py::"
TXN = GW + "test_transactions_v2_producer_epochs_per_transaction"
WIRE_OFFSETS = GW + "test_offset_commit_and_fetch_v10_name_their_topic_ids_and_carry_the_member_epoch"
WIRE_EVENTS = GW + "test_error_and_leave_events"
WIRE_JOIN = GW + "test_consumer_heartbeat_rows_name_their_topics_through_the_topic_id_map"
KIP848_SENT = "test_groups_consumer_protocol.py::test_every_heartbeat_decodes_to_what_the_coordinator_sent"
KIP848_CALLBACKS = (
    "test_groups_consumer_protocol.py::test_assignments_are_what_the_clients_callbacks_reported"
)
SHARE_PARTS = "test_share_wire.py::test_share_partitions_carry_acquired_and_acknowledged_offsets"
MAX_WAIT = "test_share_wire.py::test_fetch_and_share_fetch_requests_carry_max_wait_ms"
# Consumer, follower and metadata-log Fetch v4-v18, kio-encoded over loopback TCP, captured by tcpdump.
FETCHERS = "test_fetchers.py::"
FETCHER_REQUESTS = FETCHERS + "test_requests_rows_carry_the_encoded_replica_id_and_fetcher"
FETCHER_PARTITIONS = FETCHERS + "test_fetch_partitions_rows_repeat_them"
# KRaft (Vote, BeginQuorumEpoch, EndQuorumEpoch, metadata Fetch, BrokerRegistration, BrokerHeartbeat)
# and AlterPartition, kio-encoded over loopback TCP, captured by tcpdump.
KRAFT = "test_kraft.py::"
KRAFT_REQUESTS = KRAFT + "test_requests_rows_carry_the_sender_broker_epoch_and_fenced_state"
KRAFT_PARTITIONS = KRAFT + "test_partitions_rows_carry_leaders_epochs_votes_and_isrs"
# Which broker answered: two tansu brokers on two loopback addresses, the clients pointed at each, the
# node ids librdkafka decoded and the --broker-map the test wrote (tests/test_broker_identity.py).
BROKER_OF_ROW = "test_broker_identity.py::test_every_row_names_the_broker_each_client_was_pointed_at"
BROKER_COLUMNS = {c: BROKER_OF_ROW for c in ("broker_ip", "broker_port", "broker_id")}
# KIP-1242: struct-encoded ApiVersions v5 intents, kio-encoded Metadata/DescribeCluster cluster ids.
INTENTS = "test_misrouted.py::test_api_versions_rows_carry_what_the_client_intended_and_broker_rows_what_it_reported"
CLASSIC_CONFIG = (
    "test_groups_classic_protocol.py::test_join_requests_carry_the_clients_configuration_and_subscription"
)

ORACLE_CHECKED: dict[str, dict[str, str]] = {
    "requests": {
        "capture": CAPTURE_NAME,
        "conn_id": TSHARK_IDS,
        "correlation_id": TSHARK_IDS,
        "api_key": TSHARK_IDS,
        "api_name": "test_errors_table.py::test_group_error_takes_the_group_id_from_the_request",
        "api_version": TSHARK_IDS,
        "client_id": TSHARK_EXCHANGES,
        "ts_request": TSHARK_IDS,
        "ts_response": TSHARK_EXCHANGES,
        "latency_ms": TSHARK_EXCHANGES,
        "request_bytes": TSHARK_EXCHANGES,
        "response_bytes": TSHARK_EXCHANGES,
        "throttle_time_ms": "test_errors_table.py::test_throttle_time_and_top_level_error_code_follow_each_response_version",
        "error_code": "test_errors_table.py::test_throttle_time_and_top_level_error_code_follow_each_response_version",
        "error_name": "test_errors_table.py::test_join_group_member_id_required_is_an_error_row_with_the_requests_group",
        "error_count": "test_errors_table.py::test_requests_count_and_name_errors_below_the_top_level",
        "first_error_code": "test_errors_table.py::test_requests_count_and_name_errors_below_the_top_level",
        "first_error_name": "test_errors_table.py::test_requests_count_and_name_errors_below_the_top_level",
        "acks": RC + "test_acks0_requests_answered_by_tansu_are_ok",
        "max_wait_ms": MAX_WAIT,
        "record_count": "test_partitions_table.py::test_request_record_counts_equal_what_the_clients_sent_and_read",
        "record_bytes": "test_partitions_table.py::test_record_bytes_are_the_sizes_of_the_record_sets_sent",
        "status": RC + "test_acks0_requests_answered_by_tansu_are_ok",
        "reason": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "producer_id": TXN,
        "producer_epoch": TXN,
        "producer_id_response": TXN,
        "producer_epoch_response": TXN,
        # Kafka's specs (minimum validVersions) and kafka-python pinned to old broker versions.
        "removed_in": UPGRADE + "test_requests_flag_exactly_the_versions_kafka_4_refuses",
        "client_ip": EXCHANGE_OF_ROW,
        "replica_id": FETCHER_REQUESTS,
        "fetcher": FETCHER_REQUESTS,
        "node_id": KRAFT_REQUESTS,
        "broker_epoch": KRAFT_REQUESTS,
        "fenced": KRAFT_REQUESTS,
        **BROKER_COLUMNS,
        "intended_cluster_id": INTENTS,
        "intended_node_id": INTENTS,
        "cluster_id": INTENTS,
    },
    "connections": {
        "capture": CAPTURE_NAME,
        "conn_id": TSHARK_IDS,
        "client_ip": DPKT_FLOWS,
        "client_port": DPKT_FLOWS,
        "broker_ip": DPKT_FLOWS,
        "broker_port": DPKT_FLOWS,
        "ts_first": DPKT_FLOWS,
        "ts_last": DPKT_FLOWS,
        "kafka": "test_mid_stream_captures.py::test_mid_stream_cut_of_a_real_capture_finds_what_tshark_saw_after_the_cut",
        "syn_seen": DPKT_FLOWS,
        "fin_seen": DPKT_FLOWS,
        "rst_seen": DPKT_FLOWS,
        "packets_to_broker": DPKT_FLOWS,
        "packets_to_client": DPKT_FLOWS,
        "bytes_to_broker": DPKT_FLOWS,
        "bytes_to_client": DPKT_FLOWS,
        "frames_to_broker": TSHARK_STREAMS,
        "frames_to_client": TSHARK_STREAMS,
        "frame_bytes_to_broker": TSHARK_STREAMS,
        "frame_bytes_to_client": TSHARK_STREAMS,
        "duplicate_bytes": "test_accounting.py::test_retransmissions_and_overlaps_are_counted_once",
        "gaps": "test_capture_edges.py::test_broker_bytes_a_client_acknowledged_but_the_capture_never_saw_are_a_gap",
        "gap_bytes": "test_hostile.py::test_snaplen_96_capture_counts_every_cut_as_a_snaplen_gap",
        "ooo_overflows": "test_accounting.py::test_out_of_order_bytes_past_the_cap_give_up_the_hole_as_a_gap",
        "skipped_bytes": "test_accounting.py::test_garbage_before_a_response_is_skipped_bytes_to_the_client",
        "not_kafka_bytes": "test_other_protocol_corpus.py::test_assembled_protocol_is_never_kafka_and_passes_strict",
        "resyncs": "test_hostile.py::test_size_prefix_near_2_31_is_skipped_as_oversize_and_the_next_request_decodes",
        "requests": TSHARK_STREAMS,
        "responses": TSHARK_STREAMS,
        "unanswered": TSHARK_STREAMS,
        "no_response_expected": "test_session.py::test_acks0_produce_without_response_is_no_response_expected_and_others_unanswered",
        "orphan_responses": "test_session.py::test_response_without_request_is_counted_as_orphan",
        "decode_errors": "test_capture_edges.py::test_a_response_cut_by_the_end_of_the_capture_is_response_cut_with_what_was_seen",
        "undecodable_frames": "test_hostile.py::test_tagged_fields_with_absurd_sizes_are_counted_not_allocated",
        "client_id": TSHARK_STREAMS,
        "client_software_name": "test_errors_table.py::test_api_versions_v3_names_the_client_software",
        "client_software_version": "test_errors_table.py::test_api_versions_v3_names_the_client_software",
        "protocol_guess": "test_other_protocols.py::test_an_http_health_check_on_the_broker_port_is_not_kafka",
        "tls": "test_tls.py::test_a_real_tls_connection_on_a_broker_port_is_counted_as_encrypted",
        "tls_version": "test_tls.py::test_a_real_tls_connection_on_a_broker_port_is_counted_as_encrypted",
        "tls_sni": "test_tls.py::test_a_real_tls_connection_on_a_broker_port_is_counted_as_encrypted",
        "sasl_mechanism": "test_sasl.py::test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode",
        "sasl_outcome": "test_sasl.py::test_real_clients_scram_user_is_the_connections_principal",
        "sasl_tokens": "test_sasl.py::test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode",
        "sasl_authenticated": "test_sasl.py::test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode",
        "sasl_principal": "test_sasl.py::test_real_clients_scram_user_is_the_connections_principal",
        "stream_bytes_to_broker": DPKT_FLOWS,
        "gap_bytes_to_broker": "test_accounting.py::test_out_of_order_bytes_past_the_cap_give_up_the_hole_as_a_gap",
        "skipped_bytes_to_broker": "test_accounting.py::test_resync_after_garbage_counts_the_skipped_bytes",
        "sasl_bytes_to_broker": "test_sasl.py::test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode",
        "encrypted_bytes_to_broker": "test_tls.py::test_a_real_tls_connection_on_a_broker_port_is_counted_as_encrypted",
        "not_kafka_bytes_to_broker": "test_other_protocol_servers.py::test_python_http_server_is_not_kafka",
        "stream_bytes_to_client": DPKT_FLOWS,
        "gap_bytes_to_client": "test_capture_edges.py::test_broker_bytes_a_client_acknowledged_but_the_capture_never_saw_are_a_gap",
        "skipped_bytes_to_client": "test_accounting.py::test_garbage_before_a_response_is_skipped_bytes_to_the_client",
        "sasl_bytes_to_client": "test_sasl.py::test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode",
        "encrypted_bytes_to_client": "test_tls.py::test_tls_on_a_port_nobody_named_is_not_kafka_but_still_tls",
        "not_kafka_bytes_to_client": "test_other_protocol_servers.py::test_python_http_server_is_not_kafka",
        "implausible_gaps": "test_bad_input.py::test_port_reuse_after_drops_gives_only_the_gap_bytes_acknowledgements_prove",
        # TLS: the payload the test's own client sent, and tshark's decryption of the same capture.
        "tls_state": TLS + "test_no_key_for_the_connection_marks_it_and_counts_its_records_undecrypted",
        "tls_cipher": TLS + "test_no_key_for_the_connection_marks_it_and_counts_its_records_undecrypted",
        "tls_failed_records": TLS + "test_wrong_key_counts_every_record_as_a_failed_tag_check",
        "tls_overhead_bytes_to_broker": TLS
        + "test_no_key_for_the_connection_marks_it_and_counts_its_records_undecrypted",
        "tls_overhead_bytes_to_client": TLS
        + "test_no_key_for_the_connection_marks_it_and_counts_its_records_undecrypted",
        "decrypted_bytes_to_broker": TLS + "test_right_key_recovers_exactly_the_payload",
        "decrypted_bytes_to_client": TLS + "test_right_key_recovers_exactly_the_payload",
        # Tunnels: captures scapy wrapped (an independent encoder).
        "tunnel": "test_net_tunnels.py::test_wrapped_capture_gives_the_plain_tables",
        "duplicate_packets": "test_net_tunnels.py::test_copies_under_two_vnis_are_counted_not_decoded",
        "expired": "test_memory_budget.py::test_the_connection_holding_the_most_reassembly_bytes_is_evicted_first",
    },
    "errors": {
        "capture": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "conn_id": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "correlation_id": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "api_key": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "api_name": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "api_version": "test_errors_table.py::test_error_rows_carry_their_exchange_ids",
        "path": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "error_code": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "error_name": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "retriable": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "error_message": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "topic": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "partition": "test_errors_table.py::test_partition_error_has_topic_partition_and_message",
        "group_id": "test_errors_table.py::test_group_error_takes_the_group_id_from_the_request",
        "resource_name": "test_errors_table.py::test_resource_error_has_resource_name_and_throttle_time_is_kept",
        **EXCHANGE_COLUMNS,
        **BROKER_COLUMNS,
    },
    "partitions": {
        "capture": FETCH_OFFSETS,
        "conn_id": FETCH_OFFSETS,
        "correlation_id": FETCH_OFFSETS,
        "api_key": FETCH_OFFSETS,
        "api_name": FETCH_OFFSETS,
        "api_version": FETCH_OFFSETS,
        "group_id": PT + "test_offset_commits_carry_the_groups_committed_offsets",
        "topic": PT + "test_acknowledged_produce_records_equal_the_truth_per_topic_partition",
        "topic_id": PT + "test_topic_ids_learned_after_the_fetch_name_its_rows_at_the_end",
        "partition": PT + "test_acknowledged_produce_records_equal_the_truth_per_topic_partition",
        "error_code": PT + "test_produce_answered_with_an_error_has_no_offsets",
        "error_name": PT + "test_produce_answered_with_an_error_has_no_offsets",
        "record_count": PT + "test_acknowledged_produce_records_equal_the_truth_per_topic_partition",
        "record_bytes": PT + "test_record_bytes_are_the_sizes_of_the_record_sets_sent",
        "batch_count": PT + "test_record_bytes_are_the_sizes_of_the_record_sets_sent",
        "compression": PT + "test_every_codec_is_decoded_with_the_truths_counts",
        "crc_errors": DAMAGE,
        "partial_bytes": DAMAGE,
        "control_batches": "test_records_table.py::test_transaction_markers_in_a_fetch_are_control_records",
        "capped_batches": "test_hostile.py::test_decompression_bomb_in_a_produce_is_capped_and_counted",
        "record_errors": DAMAGE,
        "record_error": DAMAGE,
        "fetch_offset": FETCH_OFFSETS,
        "base_offset": PT + "test_produce_rows_carry_the_broker_assigned_offset_range",
        "first_offset": PT + "test_produce_rows_carry_the_broker_assigned_offset_range",
        "last_offset": PT + "test_produce_rows_carry_the_broker_assigned_offset_range",
        "high_watermark": FETCH_OFFSETS,
        "last_stable_offset": FETCH_OFFSETS,
        "log_start_offset": FETCH_OFFSETS,
        "lag": FETCH_OFFSETS,
        "committed_offset": PT + "test_offset_commits_carry_the_groups_committed_offsets",
        "offset": PT + "test_list_offsets_keeps_the_asked_timestamp_apart_from_the_answer",
        "timestamp": PT + "test_list_offsets_keeps_the_asked_timestamp_apart_from_the_answer",
        "target_timestamp": PT + "test_list_offsets_keeps_the_asked_timestamp_apart_from_the_answer",
        "leader_id": PT + "test_topic_ids_learned_before_the_fetch_name_its_rows_at_once",
        "leader_epoch": PT + "test_topic_ids_learned_before_the_fetch_name_its_rows_at_once",
        "member_epoch": WIRE_OFFSETS,
        "acquired_records": SHARE_PARTS,
        "redelivered_records": SHARE_PARTS,
        "max_delivery_count": SHARE_PARTS,
        "acquired_first_offset": SHARE_PARTS,
        "acquired_last_offset": SHARE_PARTS,
        "acquisition_lock_timeout_ms": SHARE_PARTS,
        "accepted_records": SHARE_PARTS,
        "released_records": SHARE_PARTS,
        "rejected_records": SHARE_PARTS,
        "acknowledged_first_offset": SHARE_PARTS,
        "acknowledged_last_offset": SHARE_PARTS,
        "removed_in": UPGRADE + "test_produced_message_formats_v0_and_v1_are_flagged_on_their_partitions",
        **EXCHANGE_COLUMNS,
        "replica_id": FETCHER_PARTITIONS,
        "fetcher": FETCHER_PARTITIONS,
        "node_id": KRAFT_PARTITIONS,
        "isr": KRAFT_PARTITIONS,
        "new_isr": KRAFT_PARTITIONS,
        "partition_epoch": KRAFT_PARTITIONS,
        "vote_granted": KRAFT_PARTITIONS,
        **BROKER_COLUMNS,
    },
    "records": {
        "capture": BUILT_RECORDS,
        "conn_id": BUILT_RECORDS,
        "correlation_id": BUILT_RECORDS,
        "api_key": BUILT_RECORDS,
        "api_name": BUILT_RECORDS,
        "api_version": BUILT_RECORDS,
        "topic": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "topic_id": BUILT_RECORDS,
        "partition": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "offset": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "timestamp": BUILT_RECORDS,
        "timestamp_type": BUILT_RECORDS,
        "key_size": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "value_size": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "header_count": "test_records_table.py::test_fetched_records_are_the_records_the_consumer_read",
        "producer_id": "test_records_table.py::test_idempotent_records_carry_producer_id_epoch_and_sequence",
        "producer_epoch": "test_records_table.py::test_idempotent_records_carry_producer_id_epoch_and_sequence",
        "sequence": "test_records_table.py::test_idempotent_records_carry_producer_id_epoch_and_sequence",
        "compression": "test_records_table.py::test_every_codec_appears_in_the_records_table",
        "is_control": "test_records_table.py::test_transaction_markers_in_a_fetch_are_control_records",
        "key": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
        "value": "test_records_table.py::test_produced_records_get_the_offsets_the_broker_acknowledged",
    },
    "capture_stats": {
        "capture": STATS,
        "period_start": STATS,
        "period_end": STATS,
        "packets": STATS,
        "bytes": STATS,
        "kernel_drops": STATS,
        "if_drops": STATS,
        "queue_drops": STATS,
        "worker": "test_live_fanout.py::test_two_workers_on_a_replayed_mtu1500_capture_give_the_tables_of_read",
    },
    "groups": {
        "capture": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "conn_id": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "correlation_id": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "api_key": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "api_name": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "api_version": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "group_id": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "member_id": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "group_instance_id": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "generation_id": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "protocol_type": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "protocol_name": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "leader_id": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "members": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "error_code": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "error_name": "test_groups_table.py::test_static_members_carry_their_group_instance_id",
        "ts_request": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "ts_response": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "latency_ms": "test_groups_table.py::test_group_rows_match_tsharks_exchanges_per_connection",
        "protocol": WIRE_EVENTS,
        "event": WIRE_EVENTS,
        "rack_id": WIRE_JOIN,
        "member_epoch": KIP848_SENT,
        "member_epoch_response": KIP848_SENT,
        "heartbeat_interval_ms": KIP848_SENT,
        "session_timeout_ms": CLASSIC_CONFIG,
        "rebalance_timeout_ms": CLASSIC_CONFIG,
        "subscribed_topics": CLASSIC_CONFIG,
        "subscribed_regex": WIRE_EVENTS,
        "server_assignor": WIRE_JOIN,
        "assignment": KIP848_CALLBACKS,
        "owned_partitions": KIP848_CALLBACKS,
        "client_id": EXCHANGE_OF_ROW,
        "client_ip": EXCHANGE_OF_ROW,
        **BROKER_COLUMNS,
    },
    # Sizes from the file system, packets from dpkt, statuses and reasons from inputs the test made.
    "captures": {
        "capture": CAPTURES_ROWS,
        "path": CAPTURES_ROWS,
        "bytes": CAPTURES_ROWS,
        "packets": CAPTURES_ROWS,
        "status": CAPTURES_ROWS,
        "reason": CAPTURES_ROWS,
        "warnings": CAPTURES_ROWS,
        "started": CAPTURES_ROWS,
        "duration_ms": CAPTURES_ROWS,
        "ended": CAPTURES_ROWS,
        # The poisoning host's one false claim, counted whichever answer came first.
        "broker_conflicts": "test_broker_trust.py::test_the_conflict_is_counted_in_the_captures_table_and_named_in_the_summary",
    },
}


RO = "test_report_oracles.py::"
RS = "test_report_sections.py::"
LIVE = "test_report_live.py::"
SHARE_STORY = RS + "test_share_group_redelivery_release_reject_rates_and_lock_timeouts"
SECTION_CHECKED: dict[str, str] = {
    # Each rule against its scenario: the clients' record of a killed consumer, exchanges built,
    # a segment taken out of a capture, a capture cut short.
    "findings": "test_report_findings.py::test_findings_name_each_rules_subjects_with_the_scenarios_numbers",
    # ApiVersions v5 intents encoded by the test against what its kio-answering server reported.
    "misrouted": "test_misrouted.py::test_misrouted_lists_each_connection_whose_intent_differs_from_what_its_broker_reported",
    "inventory": RS + "test_inventory_names_each_quickstart_client_with_its_role_topic_and_group",
    # lag, stopped, member_lag: the clients' own acknowledgement and commit times (their definitions
    # are being changed apart: these lines move with them).
    "lag": LIVE + "test_lag_in_seconds_matches_what_the_clients_saw",
    "stopped": LIVE + "test_a_killed_consumer_shows_as_stopped_with_growing_lag",
    "member_lag": LIVE + "test_member_lag_names_each_member_and_its_last_fetch_against_the_producers_acks",
    "rebalances": RO + "test_rebalances_run_from_the_first_join_to_the_last_sync_of_a_generation",
    "rebalance_members": RO + "test_rebalance_members_wait_for_the_others_and_reach_their_sync",
    "reconciliation": RS + "test_kip848_reconciliation_and_time_without_assignment",
    "storms": RS + "test_a_group_rebalancing_more_than_three_times_a_minute_is_a_storm",
    "share_groups": SHARE_STORY,
    "share_deliveries": SHARE_STORY,
    "latency": RO + "test_latency_is_per_api_version_and_client_without_long_polls",
    "long_polls": RO + "test_long_polls_are_judged_against_their_own_wait",
    "produce_latency": RO + "test_produce_latency_is_one_count_and_one_latency_per_request_and_topic",
    "produce_to_consume": RO
    + "test_produce_to_consume_is_each_batch_to_the_first_fetch_response_carrying_it",
    "errors": RO + "test_errors_by_code_api_topic_and_client_with_their_kind_and_rate",
    "throttled": RO + "test_throttled_clients_how_often_in_total_and_at_most",
    "throughput": RO + "test_throughput_is_the_records_and_bytes_produced_per_topic_and_minute",
    "churn": RO + "test_churn_counts_connections_opened_closed_and_short_lived_per_minute",
    "upgrade": RO + "test_upgrade_lists_each_client_and_version_a_release_refuses",
    "upgrade_zookeeper": RO + "test_upgrade_zookeeper_lists_each_sender_receiver_and_version",
    # kio-encoded broker-host traffic over loopback, timed by dpkt's reading of the pcap.
    "brokers": "test_replication.py::test_brokers_are_the_requests_latencies_errors_bytes_and_replication_share_sent",
    "replication": "test_replication.py::test_replication_is_each_followers_last_fetch_against_the_leaders_log",
    # The values kio encoded (AlterPartition, Vote, Begin/EndQuorumEpoch, metadata Fetch, broker
    # registrations and heartbeats), computed from the exchanges sent.
    "isr_changes": KRAFT + "test_report_sections_are_what_was_encoded",
    "controller": KRAFT + "test_report_sections_are_what_was_encoded",
}


def test_every_report_section_has_an_independent_check_that_reads_it() -> None:
    assert sorted(SECTION_CHECKED) == sorted(s.name for s in SECTIONS)
    wrong = []
    for section, test in SECTION_CHECKED.items():
        file, _, name = test.partition("::")
        tree = ast.parse((TESTS / file).read_text())
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        # The test names the section it checks (reads its rows by name).
        strings = {c.value for f in found for c in ast.walk(f) if isinstance(c, ast.Constant)}
        if file in SNAPSHOTS or not name.startswith("test_") or not found or section not in strings:
            wrong.append((section, test))
    assert wrong == []


def test_every_column_has_an_independent_check() -> None:
    missing = {
        table: [f.name for f in schema if f.name not in ORACLE_CHECKED.get(table, {})]
        for table, schema in SCHEMAS.items()
    }
    missing = {table: columns for table, columns in missing.items() if columns}
    # Printed ready to paste into ORACLE_CHECKED: one line per column.
    lines = []
    for table, columns in missing.items():
        lines.append(f'    "{table}": {{' + ("" if table in ORACLE_CHECKED else "  # a new table"))
        lines += [f'        "{column}": "<test file>::<test function>",' for column in columns]
        lines.append("    },")
    assert not missing, "columns with no independent check; add to ORACLE_CHECKED:\n" + "\n".join(lines)


def test_the_registry_names_only_real_columns() -> None:
    stale = [
        (table, column)
        for table, columns in ORACLE_CHECKED.items()
        for column in columns
        if table not in SCHEMAS or column not in SCHEMAS[table].names
    ]
    assert stale == []


def test_each_named_test_exists_and_is_not_a_snapshot() -> None:
    functions: dict[str, set[str]] = {}
    wrong = []
    for table, columns in ORACLE_CHECKED.items():
        for column, test in columns.items():
            file, _, name = test.partition("::")
            if file in SNAPSHOTS or not (TESTS / file).exists():
                wrong.append((table, column, test))
                continue
            if file not in functions:
                tree = ast.parse((TESTS / file).read_text())
                functions[file] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            if name not in functions[file] or not name.startswith("test_"):
                wrong.append((table, column, test))
    assert wrong == []
