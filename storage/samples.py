"""One valid sample row per record kind (content fields only): the shape of each kind at a
glance, and fixed input for the storage tests and benchmarks.

    from storage.samples import SAMPLES
    write_rows(root, "demo", "triples", "r1", [SAMPLES["triples"]])
"""

import json

MSG = [
    {"role": "system", "content": "You can call tools.", "tool_calls": None, "tool_call_id": None, "name": None},
    {"role": "user", "content": "Where was Ada born?", "tool_calls": None, "tool_call_id": None, "name": None},
    {"role": "assistant", "content": "<think>search</think>", "tool_call_id": None, "name": None,
     "tool_calls": [{"id": "c1", "name": "search", "arguments": json.dumps({"query": "Ada"}), "injected_error": None}]},
    {"role": "tool", "content": "{\"results\": []}", "tool_calls": None, "tool_call_id": "c1", "name": "search"},
    {"role": "assistant", "content": "<think>ok</think><answer>Velmora</answer>", "tool_calls": None,
     "tool_call_id": None, "name": None},
]

SAMPLES = {
    "documents": {"doc_id": "d1", "title": "Ada Quell", "text": "Ada Quell was born in Velmora.", "source": "world",
                  "meta": json.dumps({"entity_type": "person"})},
    "triples": {"triple_id": "t1", "question": "Where was Ada born?", "answer": "Velmora", "aliases": ["Velmora City"],
                "golden_doc_ids": ["d1"], "supporting_facts": [{"doc_id": "d1", "sentence": "Ada Quell was born in Velmora."}],
                "hop_count": 1, "qtype": "bridge", "source": "world", "meta": None},
    "tools": {"tool_id": "tl1", "domain": "biography", "name": "search_people", "description": "Find people.",
              "json_schema": json.dumps({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
              "variant_of": None, "meta": None},
    "trajectories": {"traj_id": "tr1", "triple_id": "t1", "question": "Where was Ada born?", "route": "single",
                     "case": "clean", "messages": MSG,
                     "tools": [{"tool_id": "tl1", "name": "search", "description": "Search.",
                                "parameters": json.dumps({"type": "object"})}],
                     "correct_tools": ["search"], "answer": "Velmora", "meta": None},
    "tasks": {"task_id": "k1", "question": "Where was Ada born?", "answer": "Velmora", "aliases": [],
              "qcp": {"seed_doc_id": "d1", "hops": [{"query": "Ada Quell", "doc_ids": ["d1"], "note": "birthplace",
                                                      "passages": ["Ada Quell was born in Velmora."]}]},
              "hop_count": 1, "examiner_step": 3, "meta": None},
    "rollouts": {"rollout_id": "r1", "prompt_id": "t1", "policy_version": 2, "messages": MSG, "answer": "Velmora",
                 "reward": 1.0, "num_tokens": 42, "logprob_sum": -3.5, "logprob_mean": -0.083, "logprob_min": -1.2,
                 "meta": None},
    "labels": {"prompt_id": "t1", "strategy": "care", "score": 0.7, "requested_at": None, "label": "Velmora",
               "source": "oracle", "cost": 1.0, "meta": None},
    "verdicts": {"record_id": "tr1", "record_kind": "trajectories", "layer": "rules", "check": "answer_match",
                 "passed": False, "reason": "answer_mismatch", "score": 0.0, "detail": "expected Velmora"},
}
