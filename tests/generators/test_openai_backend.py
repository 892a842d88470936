"""The `openai` backend against flaky scripted HTTP servers on 127.0.0.1 (tests/generators/
servers.py): retries, the no-retry rule for 4xx, the give-up error, and that no completion is
lost, duplicated or reordered. The project's own server is tested in test_llm_server.py.

    .venv/bin/python -m pytest tests/generators/test_openai_backend.py -q
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generators.llm.base import BackendError, ChatRequest
from generators.llm.openai_backend import OpenAIBackend, _Retryable, chat_url, parse_response, parse_retry_after

from .servers import FlakyServer

FAILURES = ["garbage", "no_choices", "few", "dup", "drop", "hangup", "500", "429"]


def _req(nonce: str, n: int = 2, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": nonce}], n=n, **kw)


def _backend(server: FlakyServer, **kw) -> OpenAIBackend:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 10)
    return OpenAIBackend(server.url, "flaky", **kw)


def _scripted(script: dict[str, list[str]]):
    """plan from {nonce: [action for attempt 0, 1, ...]}; 'ok' after the list runs out."""
    return lambda nonce, attempt: (script.get(nonce) or [])[attempt] if attempt < len(script.get(nonce) or []) else "ok"


def test_url_and_retry_after_helpers():
    assert chat_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a past date: no wait
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_every_url_option_reads_a_server_with_or_without_v1():
    """One form for --base-url and --annotator-url: `http://host:port`, with or without /v1; the
    model list of a real HTTP server is read either way. The server a command samples from is
    --base-url in every command that has one, and each URL option's help says the same form."""
    from typer.testing import CliRunner

    from flows.cli import app
    from generators.llm.openai_http import URL_FORM, api_url
    from generators.llm.registry import server_model
    from generators.llm.standin_engine import StandinEngine

    assert {api_url(u) for u in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions")} \
        == {"http://h:1/v1"}
    with StandinEngine(slots=1, latency=0.0, model="m7") as engine:
        root = engine.url.removesuffix("/v1")
        assert server_model(root) == server_model(engine.url) == server_model(f"{root}/,{engine.url}") == "m7"
    for args, option in ((["synthesize"], "--base-url"), (["validate"], "--base-url"),
                         (["acquire-labels"], "--base-url"), (["acquire-labels"], "--annotator-url"),
                         (["train", "eval"], "--base-url"), (["train", "grpo"], "--base-url"),
                         (["selfplay", "run"], "--base-url")):
        out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "400"}).output
        line = next(x for x in out.splitlines() if x.split()[1:2] == [option])
        assert URL_FORM in " ".join(line.split()), line


@pytest.mark.parametrize("body", [
    "not json", "[1, 2]", '{"object": "error"}', '{"choices": [1]}', '{"choices": []}',
    '{"choices": [{"index": 0, "message": {"content": 5}}]}',
    '{"choices": [{"index": 0, "message": {"content": "x"}, "token_ids": ["a"]}]}',
    '{"choices": [{"index": 0, "message": {"content": "x"}, "logprobs": {"content": [{"logprob": null}]}}]}',
    '{"choices": [{"index": 0, "message": {"content": "x"}}], "usage": {"prompt_tokens": "many"}}',
    '{"choices": [{"index": 3, "message": {"content": "x"}}]}',
])
def test_malformed_bodies_are_bad_responses(body):
    with pytest.raises(_Retryable, match="bad_response"):
        parse_response(body, 1, want_logprobs=True)


def test_choice_count_is_checked_without_indices_too():
    one = '{"choices": [{"message": {"content": "x"}}]}'
    with pytest.raises(_Retryable, match="1 choices for n=2"):
        parse_response(one, 2, want_logprobs=False)
    assert parse_response(one, 1, want_logprobs=False).completions[0].text == "x"


def test_only_a_total_token_count_is_split_over_the_choices():
    body = {"choices": [{"index": k, "message": {"content": "x"}} for k in range(3)],
            "usage": {"prompt_tokens": 4, "completion_tokens": 10}}
    res = parse_response(json.dumps(body), 3, want_logprobs=False)
    assert [c.completion_tokens for c in res.completions] == [4, 3, 3] and res.completion_tokens == 10


def test_ok_maps_choices_in_index_order_with_ids_logprobs_and_usage():
    with FlakyServer(_scripted({})) as srv:
        b = _backend(srv)
        out = b.generate([_req("a", n=3, logprobs=True, stop=["\n"], seed=5), _req("b", n=1)])
    assert [[c.text for c in cs] for cs in out] == [["a#0", "a#1", "a#2"], ["b#0"]]
    first = out[0]
    assert [c.token_ids for c in first] == [[0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert [c.logprobs for c in first] == [[-0.5] * 3, [-1.0] * 3, [-1.5] * 3]
    assert [c.finish_reason for c in first] == ["stop", "length", "stop"]
    assert out[1][0].logprobs is None  # not asked
    assert all(c.prompt_tokens == 7 and c.completion_tokens == 3 for cs in out for c in cs)
    sent = {b_["messages"][-1]["content"]: b_ for b_ in srv.bodies}
    assert sent["a"]["n"] == 3 and sent["a"]["stop"] == ["\n"] and sent["a"]["seed"] == 5
    assert sent["a"]["logprobs"] is True and sent["a"]["top_logprobs"] == 0
    assert sent["a"]["return_token_ids"] is True and sent["a"]["model"] == "flaky"
    assert "logprobs" not in sent["b"] and "seed" not in sent["b"]
    assert b.usage.requests == 2 and b.usage.retries == 0 and b.usage.failures == 0
    assert b.usage.prompt_tokens == 14 and b.usage.completion_tokens == 12
    assert b.usage.seconds > 0


def test_500_twice_then_ok_retries_exactly_twice():
    with FlakyServer(_scripted({"x": ["500", "500"]})) as srv:
        b = _backend(srv)
        out = b.generate([_req("x")])
    assert srv.attempts["x"] == 3
    assert [c.text for c in out[0]] == ["x#0", "x#1"]
    assert b.usage.retries == 2 and b.usage.failures == 0 and b.usage.requests == 1


def test_429_honours_retry_after():
    with FlakyServer(_scripted({"x": ["429"]}), retry_after="1") as srv:
        b = _backend(srv, backoff=0.001)
        out = b.generate([_req("x")])
        gap = srv.arrivals["x"][1] - srv.arrivals["x"][0]
    assert srv.attempts["x"] == 2 and len(out[0]) == 2
    # The backoff alone would wait ~1 ms; the server asked for 1 s.
    assert gap >= 0.95


def test_400_is_not_retried_and_reports_server_message():
    with FlakyServer(_scripted({"x": ["400"]})) as srv:
        b = _backend(srv)
        with pytest.raises(BackendError, match=r"request 0: HTTP 400.*max_tokens is too large"):
            b.generate([_req("x")])
    assert srv.attempts["x"] == 1
    assert b.usage.retries == 0 and b.usage.failures == 1


def test_return_token_ids_rejected_is_dropped_once_without_a_retry():
    with FlakyServer(_scripted({}), reject_token_ids=True) as srv:
        b = _backend(srv, max_concurrency=1)
        out = b.generate([_req("x"), _req("y")])
    assert [c.text for c in out[1]] == ["y#0", "y#1"]
    assert out[0][0].token_ids == []  # this server cannot give them
    assert b.return_token_ids is False and b.usage.retries == 0
    assert srv.attempts["x"] == 2 and srv.attempts["y"] == 1  # asked once, then never again


@pytest.mark.parametrize("action", FAILURES)
def test_each_failure_kind_is_retried(action):
    with FlakyServer(_scripted({"x": [action]}), retry_after="0") as srv:
        b = _backend(srv)
        out = b.generate([_req("x", n=3)])
    assert srv.attempts["x"] == 2
    assert [c.text for c in out[0]] == ["x#0", "x#1", "x#2"]
    assert b.usage.retries == 1


def test_timeout_is_retried():
    with FlakyServer(_scripted({"x": ["slow"]}), slow_seconds=3.0) as srv:
        b = _backend(srv, timeout=0.5)
        out = b.generate([_req("x")])
    assert srv.attempts["x"] == 2 and [c.text for c in out[0]] == ["x#0", "x#1"]


def test_gives_up_after_the_limit_naming_request_and_reason():
    with FlakyServer(lambda nonce, attempt: "garbage" if nonce == "bad" else "ok") as srv:
        b = _backend(srv, max_retries=2)
        with pytest.raises(BackendError) as err:
            b.generate([_req("fine"), _req("bad"), _req("fine2")])
    msg = str(err.value)
    assert "request 1" in msg and "3 attempts" in msg and "bad_response" in msg and "not JSON" in msg
    assert srv.attempts["bad"] == 3
    assert b.usage.failures == 1 and b.usage.retries >= 2


def test_bounded_concurrency_and_request_order():
    with FlakyServer(_scripted({}), delay=0.05) as srv:
        b = _backend(srv, max_concurrency=3)
        out = b.generate([_req(f"q{i}", n=1) for i in range(12)], progress=True)
    assert [cs[0].text for cs in out] == [f"q{i}#0" for i in range(12)]
    assert 1 <= srv.max_inflight <= 3


def test_agenerate_and_generate_inside_a_running_loop():
    with FlakyServer(_scripted({})) as srv:
        b = _backend(srv)

        async def main():
            a = await b.agenerate([_req("a", n=1)])
            s = b.generate([_req("s", n=1)])  # sync call from inside a loop must still work
            return a, s

        a, s = asyncio.run(main())
    assert a[0][0].text == "a#0" and s[0][0].text == "s#0"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.lists(st.sampled_from(FAILURES), max_size=3), min_size=1, max_size=6),
       ns=st.lists(st.integers(1, 4), min_size=6, max_size=6))
def test_no_lost_or_duplicated_completions_under_random_failures(script, ns):
    plan = {f"r{i}": actions for i, actions in enumerate(script)}
    with FlakyServer(_scripted(plan), retry_after="0") as srv:
        b = _backend(srv, max_retries=3, backoff=0.001, max_concurrency=4)
        reqs = [_req(f"r{i}", n=ns[i]) for i in range(len(script))]
        out = b.generate(reqs)
    assert [[c.text for c in cs] for cs in out] == [[f"r{i}#{k}" for k in range(ns[i])] for i in range(len(script))]
    for i, actions in enumerate(script):
        assert srv.attempts[f"r{i}"] == len(actions) + 1
    assert b.usage.retries == sum(len(a) for a in script)
    assert b.usage.requests == len(script) and b.usage.failures == 0
