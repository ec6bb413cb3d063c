"""Kafka protocol schema set: header parsing and body decoders generated from Kafka's message specs.

No I/O: everything here takes bytes (or memoryviews) and returns plain Python values.
"""

from kwsniff.protocol.decode import (
    decode_metadata_record,
    decode_request,
    decode_request_view,
    decode_response,
    decode_response_view,
    message_fields,
    schema_triples,
)
from kwsniff.protocol.decode_error import DecodeError
from kwsniff.protocol.error_codes import (
    EXPECTED_ERRORS,
    error_expected,
    error_label,
    error_name,
    error_names,
    error_retriable,
)
from kwsniff.protocol.headers import (
    api_name,
    api_names,
    is_flexible,
    is_plausible_request_version,
    is_valid_request_version,
    parse_request_header,
    parse_response_header,
    request_header_version,
    response_header_version,
)
from kwsniff.protocol.releases import magic_removed_in, removed_in

__all__ = [
    "EXPECTED_ERRORS",
    "DecodeError",
    "api_name",
    "api_names",
    "decode_metadata_record",
    "decode_request",
    "decode_request_view",
    "decode_response_view",
    "decode_response",
    "error_expected",
    "error_label",
    "error_name",
    "error_names",
    "error_retriable",
    "is_flexible",
    "is_plausible_request_version",
    "is_valid_request_version",
    "magic_removed_in",
    "message_fields",
    "parse_request_header",
    "parse_response_header",
    "removed_in",
    "request_header_version",
    "response_header_version",
    "schema_triples",
]
