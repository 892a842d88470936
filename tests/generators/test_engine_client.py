"""The `openai` backend's engine-facing parts against the stand-in engine on 127.0.0.1:
the journal (an answer journaled is never asked again, a torn line is skipped), several
endpoints sharing the requests, the adaptive limit (grows past the engine's slots while
latency holds, backs off on overload, not on a few 503s; fills an engine that states its
load and stops at its slots), a restart and 503s retried with
nothing completed twice, and a 401 stopping every request in flight."""

from __future__ import annotations

from collections import deque

import pytest

from generators.llm.base import BackendError, ChatRequest, submit
from generators.llm.limiter import AdaptiveLimit
from generators.llm.openai_backend import OpenAIBackend, request_key
from generators.llm.registry import BackendConfig
from generators.llm.scripted import ScriptedBackend, scripted_text
from generators.llm.server_load import Load, metrics_url, parse_load
from generators.llm.standin_engine import StandinEngine
from storage.journal import Journal


def _reqs(n: int, tag: str = "q") -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "user", "content": f'look up "{tag}{i}"'}], seed=i) for i in range(n)]


def _texts(out) -> list[str]:
    return [cs[0].text for cs in out]


def test_journal_keeps_answers_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "j" / "run.jsonl"
    j = Journal(path)
    j.put("a", [{"text": "x"}])
    j.put("b", [{"text": "y"}])
    with open(path, "a") as f:
        f.write('{"k": "c", "v": [{"te')  # a kill in the middle of a line
    again = Journal(path)
    assert len(again) == 2 and again.get("a") == [{"text": "x"}] and again.get("c") is None
    again.put("d", [{"text": "z"}])
    assert Journal(path).get("d") == [{"text": "z"}] and len(Journal(path)) == 3
    again.remove()
    assert not path.exists()


def test_answers_are_journaled_and_never_asked_again(tmp_path):
    with StandinEngine(slots=8, latency=0.0) as engine:
        first = OpenAIBackend(engine.url, "standin", journal=Journal(tmp_path / "j.jsonl"))
        out = first.generate(_reqs(20))
        first.close()
        assert engine.completed == 20 and len(Journal(tmp_path / "j.jsonl")) == 20
        again = OpenAIBackend(engine.url, "standin", journal=Journal(tmp_path / "j.jsonl"))
        out2 = again.generate(_reqs(25))  # 20 from the journal, 5 new
        again.close()
        assert engine.completed == 25 and engine.repaid == 0 and again.usage.journaled == 20
    assert _texts(out2)[:20] == _texts(out)
    assert _texts(out2) == [scripted_text(f'look up "q{i}"', i) for i in range(25)]


def test_a_request_asked_again_while_in_flight_is_sent_once():
    """Records that share a question ask the same request (answerability's prompt without
    pages): in one batch, or in two batches streamed at once, the engine completes it once,
    and each position gets the answer (its own copy)."""
    reqs = _reqs(10)
    with StandinEngine(slots=4, latency=0.2) as engine:
        b = OpenAIBackend(engine.url, "standin")
        out = b.generate(reqs + reqs[:5])
        assert engine.completed == 10 and engine.repaid == 0
        later = _reqs(6, tag="r")
        a, c = b.submit(later), b.submit(later[2:] + reqs[:1])  # (reqs[0] was completed: asked again)
        both = a.result(), c.result()
        b.close()
        assert engine.completed == 10 + 6 + 1 and engine.repaid == 1
    assert _texts(out) == _texts(out[:10]) + _texts(out[:5])
    assert out[10][0] is not out[0][0] and out[10][0] == out[0][0]
    assert _texts(both[1]) == _texts(both[0])[2:] + _texts(out[:1])


def test_request_key_is_the_body_with_its_seed_but_not_the_token_id_switch():
    b = OpenAIBackend("http://127.0.0.1:9/v1", "m")
    r = _reqs(2)
    assert request_key(b.body(r[0])) != request_key(b.body(r[1]))
    with_ids = b.body(r[0])
    b.return_token_ids = False
    assert request_key(with_ids) == request_key(b.body(r[0]))
    b.close()


def test_several_endpoints_share_the_requests():
    with StandinEngine(slots=4, latency=0.02) as one, StandinEngine(slots=4, latency=0.02) as two:
        b = OpenAIBackend(f"{one.url}, {two.url}", "standin", max_concurrency=4)
        out = b.generate(_reqs(60))
        b.close()
        assert one.completed > 0 and two.completed > 0 and one.completed + two.completed == 60
        assert one.max_busy <= 4 and two.max_busy <= 4  # a fixed limit is per endpoint
    assert _texts(out) == [scripted_text(f'look up "q{i}"', i) for i in range(60)]


def test_the_limit_grows_past_the_slots_while_latency_holds_and_settles_above_them():
    """A model of an engine with 256 slots answering 256 requests a step, first come first
    served: a request's latency grows with the queue it joined."""
    lim, slots, queue, seen = AdaptiveLimit(), 256, deque(), []
    for _ in range(3000):
        while lim.has_room():
            lim.enter()
            queue.append(0.01 * max(1.0, lim.inflight / slots))
        for _ in range(min(len(queue), slots)):
            lim.leave()
            lim.observe(queue.popleft())
        seen.append(lim.limit)
    assert seen[1] > seen[0]  # it grew from where it started
    assert slots <= min(seen[50:]) and max(seen[50:]) <= 4 * slots  # the engine full, its queue bounded


def test_a_server_stating_its_load_is_filled_fast_and_not_flooded():
    """A model of an engine with 256 slots that states its load each step (what runs, what
    waits): from 64 the limit reaches the slots in a few readings and then holds the slots
    plus a short queue; with other clients' requests waiting too, it gives way."""
    lim, slots, seen = AdaptiveLimit(), 256, []
    for _ in range(12):
        while lim.has_room():
            lim.enter()
        lim.report(min(lim.inflight, slots), max(0, lim.inflight - slots))
        seen.append(lim.limit)
    assert seen[2] >= slots and all(slots <= v <= slots + slots // 2 for v in seen[4:]), seen
    assert lim.reported
    shared = AdaptiveLimit(start=256)
    for _ in range(256):
        shared.enter()
    shared.report(256, 200)  # 200 of another client's requests wait beside ours
    assert shared.limit < 256 // 2
    stale = AdaptiveLimit(start=64)
    for _ in range(64):
        stale.enter()
    stale.report(0, 0)  # gauges that are not kept: they do not count the 64 in flight
    assert stale.limit == 64 and not stale.reported


def test_load_is_read_from_vllm_and_sglang_metrics_pages():
    vllm = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
            '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 1.0\n')
    assert parse_load(vllm) == Load(running=3, waiting=6)
    assert parse_load('sglang:num_running_reqs{model_name="x"} 7\nsglang:num_queue_reqs{model_name="x"} 0\n') == \
        Load(running=7, waiting=0)
    assert parse_load("process_cpu_seconds_total 1.5\n") is None and parse_load("<html>404</html>") is None
    assert metrics_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/metrics"


@pytest.mark.parametrize("metrics", [True, False])
def test_the_client_reads_the_engines_load_where_it_states_it(metrics):
    with StandinEngine(slots=64, latency=0.3, metrics=metrics) as engine:
        b = OpenAIBackend(engine.url, "standin")
        out = b.generate(_reqs(600))
        assert engine.completed == 600 and engine.max_busy == 64
        assert b.limits[0].reported is metrics and (0 in b._unread) is not metrics  # (a page-less server: asked once)
        if metrics:  # it stopped at the engine's slots plus a queue of half as many, not at latency's guess
            assert 64 <= b.max_concurrency <= 64 + 32
        b.close()
    assert _texts(out) == [scripted_text(f'look up "q{i}"', i) for i in range(600)]


def test_the_limit_backs_off_on_overload_but_not_on_a_few_503s():
    few, many = AdaptiveLimit(start=100), AdaptiveLimit(start=100)
    for k in range(100):
        few.observe(0.01 if k % 20 else None, overload=k % 20 == 0)  # 5% 503s
        many.observe(0.01 if k % 2 else None, overload=k % 2 == 0)  # half
    assert few.limit >= 100 and many.limit <= 70
    fixed = AdaptiveLimit(start=8, fixed=True)
    for _ in range(50):
        fixed.enter()
        fixed.observe(None, overload=True)
    assert fixed.limit == 8


def test_503s_and_a_restart_are_retried_and_nothing_is_completed_twice():
    with StandinEngine(slots=16, latency=0.05, fail_503=0.2, restart_at=40, down=0.3) as engine:
        b = OpenAIBackend(engine.url, "standin", backoff=0.05)
        out = b.generate(_reqs(120))
        b.close()
        assert engine.answered_503 > 0 and engine.dropped > 0 and b.usage.retries > 0
        assert engine.completed == 120 and engine.twice_completed() == 0
    assert _texts(out) == [scripted_text(f'look up "q{i}"', i) for i in range(120)]


def test_a_restarting_server_gets_one_probe_at_a_time_not_every_request_retrying():
    """64 requests in flight when the server drops them and refuses connections for a second: each
    fails once, then one probe asks the endpoint for its model list every `backoff` while the rest
    wait for it, and all go again when it answers: the retries are about the requests dropped, not
    those times the attempts a second of backoff allows."""
    with StandinEngine(slots=64, latency=0.2, restart_at=100, down=1.0) as engine:
        b = OpenAIBackend(engine.url, "standin", max_concurrency=64, backoff=0.02, max_retries=12)
        out = b.generate(_reqs(300))
        b.close()
        dropped = engine.dropped
        assert 0 < dropped <= 64 and engine.completed == 300 and engine.twice_completed() == 0
        # the requests in flight when it went away (at most 64: dropped, or sent to the closed port
        # before the first failure came back) fail once or, on a loaded machine, twice (the probe's
        # model-list questions are no retries); retrying on its own, each made ~10 attempts (631 here)
        assert b.usage.retries <= 2 * 64 + 16, (b.usage.retries, dropped)
    assert _texts(out) == [scripted_text(f'look up "q{i}"', i) for i in range(300)]


def test_a_401_stops_every_batch_in_flight_with_one_line():
    with StandinEngine(slots=4, latency=0.2, unauthorized=True) as engine:
        b = OpenAIBackend(engine.url, "standin", max_concurrency=2)
        futures = [b.submit(_reqs(10, tag)) for tag in "abc"]
        for f in futures:
            with pytest.raises(BackendError) as err:
                f.result(timeout=30)
            msg = str(err.value)
            assert "\n" not in msg and engine.url in msg and "HTTP 401" in msg and "request " in msg
        b.close()
        assert engine.received <= 4 and engine.completed == 0  # nothing retried, the rest never sent


def test_submit_answers_at_once_for_a_backend_that_does_not_stream():
    fut = submit(ScriptedBackend(), _reqs(3))
    assert fut.done() and _texts(fut.result()) == [scripted_text(f'look up "q{i}"', i) for i in range(3)]


def test_pace_fields_do_not_change_the_run_id():
    base = BackendConfig(backend="openai", base_url="http://h/v1", model="m")
    paced = BackendConfig(backend="openai", base_url="http://h/v1", model="m", max_concurrency=256,
                          max_retries=2, timeout=5.0)
    assert base.config_hash() == paced.config_hash() == "de48e17aeb48e801"  # its hash before the change
    assert BackendConfig().config_hash() == "dd6b0477cd678a8d"  # older runs keep their ids
    assert base.config_hash() != BackendConfig(backend="openai", base_url="http://h/v1", model="n").config_hash()
