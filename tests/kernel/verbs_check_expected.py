"""What each of verbs-check's checks must observe on rxe (its "got"), in the tool's order:
one table for the tests that run verbs-check in one guest and across two nodes."""

RXE_EXPECTED = {
    "send-recv": "verified",
    "write": "verified",
    "read": "verified",
    "sq-overflow": "refused",
    "bad-rkey-read": "remote_access_error",
    "zero-length-read": "success",
    "dead-peer-read": "retry_exceeded",
    "dead-peer-bad-rkey-read": "retry_exceeded",
    "liveness-probe": "dead",
}
