"""Kafka framing and request/response pairing over reassembled TCP streams (no I/O)."""

from kwsniff.kafka.framing import FrameSplitter
from kwsniff.kafka.pairing import (
    DECODE_ERROR,
    NO_RESPONSE_EXPECTED,
    OK,
    RESPONSE_CUT,
    UNANSWERED,
    Conversation,
    ConversationHandler,
    Request,
    Response,
    plausible_request,
)

__all__ = [
    "DECODE_ERROR",
    "NO_RESPONSE_EXPECTED",
    "OK",
    "RESPONSE_CUT",
    "UNANSWERED",
    "Conversation",
    "ConversationHandler",
    "FrameSplitter",
    "Request",
    "Response",
    "plausible_request",
]
