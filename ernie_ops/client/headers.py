"""The HTTP headers the gateway and its clients agree on (nginx/ernie-ops.conf sets and reads them)."""

UPSTREAM_HEADER = "x-ernie-upstream"  # set by nginx/ernie-ops.conf on every response: which instance answered
SESSION_HEADER = "x-session-id"  # a request's session key ($http_x_session_id in nginx/ernie-ops.conf): one replica per key
