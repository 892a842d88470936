"""What a served engine says of its own load: the requests it runs and those it queues.

vLLM and SGLang serve Prometheus gauges at `/metrics` beside their `/v1` API, by default:

  vLLM    vllm:num_requests_running   vllm:num_requests_waiting
  SGLang  sglang:num_running_reqs     sglang:num_queue_reqs

A server that queues requests runs as many as it can (vLLM's `max_num_seqs`, SGLang's
`max_running_requests`, or what its KV cache holds); one that queues none has room. The
HTTP client reads this while it has requests in flight (generators/llm/limiter.py
`AdaptiveLimit.report`) instead of finding the server's size by latency alone. A server
without these gauges (a hosted API, this project's own server) is read once and then left
alone.

    load = parse_load(text)      # Load(running=64, waiting=0), or None without the gauges
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from generators.llm.openai_http import api_url

GAUGES = {"running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
          "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs")}


@dataclass(frozen=True)
class Load:
    running: int
    waiting: int


def metrics_url(base_url: str) -> str:
    """The `/metrics` address of a server whose API is at `base_url` (any form `api_url` takes)."""
    return api_url(base_url).removesuffix("/v1") + "/metrics"


def parse_load(text: str) -> Load | None:
    """The load a Prometheus text states (each gauge summed over its labels: several models
    or engines of one server), or None when it states neither gauge."""
    found: dict[str, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for family in families:
        for what, names in GAUGES.items():
            if family.name in names:
                found[what] = found.get(what, 0.0) + sum(s.value for s in family.samples)
    if "running" not in found or "waiting" not in found:
        return None
    return Load(running=int(found["running"]), waiting=int(found["waiting"]))
