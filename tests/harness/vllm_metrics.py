"""vLLM's /metrics text for the canary window and `ernie-ops top` tests: one instance's TTFT and inter-token
latency histograms, its finished requests by reason and its start time, each a `str.format` field
(a, b: requests under the first bucket / in all; ok, abort, error; start).
"""

from __future__ import annotations

METRICS = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="m"}} {a}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {b}
vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {b}
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} 1.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.05",model_name="m"}} {a}
vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {b}
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {b}
vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} 1.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} {ok}
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 0.0
vllm:request_success_total{{engine="0",finished_reason="abort",model_name="m"}} {abort}
vllm:request_success_total{{engine="0",finished_reason="error",model_name="m"}} {error}
# TYPE process_start_time_seconds gauge
process_start_time_seconds {start}
"""
