"""The README.md of a verl export (train/verl_export.py): its files, how a verl worker gets the
reward and the tool adapter, forgeplay's objectives in verl and what verl cannot express, and
the verl command line with the measured max_prompt_length."""

from __future__ import annotations

from pathlib import Path

from train import verl_bundle

_HEAD = """# forgeplay export of `{dataset}` for verl

Files: {files}; reward.py (verl's custom reward, standard library only) and the package
forgeplay_verl/ beside it (a copy of forgeplay's reward{tool_part} and objectives; no forgeplay
install needed).

Columns: data_source, prompt (chat list), ability, reward_model {{style, ground_truth}} (the plain
gold answer), extra_info {{split, index, id, kind, question, answer, aliases, hop_count, qtype,
need_tools_kwargs, label, vote_weight, format_weight{tool_cols}}}, agent_name.

Prompt lengths ({tokenizer}): {lengths}
"""

_TOOLS = """
Tool rows: agent_name=tool_agent, extra_info.tool_selection = the tools the row offers,
extra_info.tools_kwargs[<tool name>].create_kwargs = {{golden_doc_ids, seed}} for those tools and
no other (a JSON object of Parquet's JSON type: verl's dataset loader, Hugging Face `datasets`,
reads it as a dict). tool_config.yaml declares {n_tools} tools, each a forgeplay_verl SimulatorTool:
forgeplay's BM25 simulator over the corpus of `{corpus}` (forgeplay_verl/corpus), so a call returns
what forgeplay's simulator returns for its arguments (a search by its query; the golden pages only
set the tool metric `found`); a call to a tool the row does not offer is answered
{{"error": "unknown_tool", ...}}. Tools are listed once, {where}.

Every machine that runs verl workers needs, beside verl, the packages the simulator imports
(these versions give byte-identical results): `pip install {requirements}`.
"""

_WHERE = {"system": "in the system prompt, as the trajectories were synthesized (this tokenizer's chat "
                    "template ignores the tool schemas verl passes it)",
          "template": "by the chat template (it renders the tool schemas verl passes it, those of the row's "
                      "tool_selection; the `<tools>` block was cut from the system prompt)"}

_COMMAND = """
One machine (Ray started by verl; its workers inherit PYTHONPATH, which makes forgeplay_verl importable):

```bash
PYTHONPATH={out} python -m verl.trainer.main_ppo \\
  algorithm.adv_estimator=grpo \\
  data.train_files={out}/train.parquet data.val_files={out}/test.parquet \\
  data.prompt_key=prompt data.return_raw_chat=True \\
  data.max_prompt_length={max_prompt_length} data.max_response_length=1024 \\
  actor_rollout_ref.model.path=MODEL \\
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.n=8 \\
{multi_turn}  reward.custom_reward_function.path={out}/reward.py \\
  reward.custom_reward_function.name=compute_score
```

A Ray cluster: ship this folder as the job's working directory (Ray copies it to every node,
makes it each worker's current directory and puts it on sys.path), with the same arguments and
relative paths (`data.train_files=train.parquet`, `...tool_config_path=tool_config.yaml`,
`reward.custom_reward_function.path=reward.py`):

```bash
ray job submit --address http://HEAD:8265 --working-dir {out} -- python -m verl.trainer.main_ppo ...
```
"""

_OBJECTIVES = """
## forgeplay's objectives in verl

forgeplay_verl/train/verl_objective.py registers two advantage estimators with verl's registry
(`verl.trainer.ppo.core_algos.register_adv_est`) when verl imports it
(`VERL_USE_EXTERNAL_MODULES={module}`, in every verl process):

- `algorithm.adv_estimator=forgeplay_labels`: label-aware GRPO with CARE's weights. Per prompt,
  the label is extra_info.label (bought in forgeplay, from its ledger) else the majority vote of
  the prompt's n answers; each response is rewarded against it (1 exact, 0.5 x F1, 0 without one
  `<answer>`, + extra_info.format_weight when well formed); the group's GRPO advantages are
  weighted 1 for a bought label, extra_info.vote_weight (0 here) for a voted one.
- `algorithm.adv_estimator=forgeplay_hrpo`: HRPO, the rewards normalised among the batch's
  responses whose extra_info.hop_count is the same.

verl passes a registered estimator only the rewards, the mask and the group ids, so they run
under the trainer the module registers too: add `trainer.v1.trainer_mode=forgeplay` (verl's
synchronous trainer, whose advantage step hands them each row's extra_info and answer).
`forgeplay train grpo ... --engine verl --dry-run` writes these settings for a run.

Not available inside verl: CARE's probes (they learn from the policy's hidden states within
forgeplay's trainer, so a voted prompt weighs extra_info.vote_weight), and self-play's
distillation from a teacher that reads the question's construction path: verl's distillation
scores the student's own prompt and response with a served teacher, with no hook to give the
teacher a prompt of its own, and that teacher is a fixed model, not a moving average of the student.
"""

_MULTI_TURN = """  actor_rollout_ref.rollout.multi_turn.enable=True \\
  actor_rollout_ref.rollout.multi_turn.format=hermes \\
  actor_rollout_ref.rollout.multi_turn.tool_config_path={out}/tool_config.yaml \\
  actor_rollout_ref.rollout.multi_turn.max_assistant_turns=8 \\
"""


def _lengths(r) -> str:
    s = r.lengths
    if not s:
        return "not measured (no tokenizer; pass --tokenizer PATH). Set data.max_prompt_length yourself."
    return (f"{s['rows']} prompts, median {s['median']}, p95 {s['p95']}, max {s['max']} tokens, counted as verl's "
            f"dataset filter counts them; data.max_prompt_length={s['max_prompt_length']} keeps every row (a "
            "shorter limit drops the longer prompts, or with data.filter_overlong_prompts=False cuts them "
            "from the left, tool list first).")


def render(dataset: str, out: Path, r) -> str:
    """The README text for export result `r` (a VerlExport) written to `out`."""
    tools = bool(r.tools_in)
    text = _HEAD.format(dataset=dataset, files=", ".join(f"{k} ({v} rows)" for k, v in r.files.items()),
                        tool_part=", tool adapter and simulator" if tools else "",
                        tool_cols=", tool_selection, tools_kwargs" if tools else "",
                        tokenizer=r.tokenizer or "no tokenizer", lengths=_lengths(r))
    if tools:
        text += _TOOLS.format(n_tools=len(r.tool_names), corpus=r.corpus, where=_WHERE[r.tools_in],
                              requirements=" ".join(r.requirements))
    if r.left_out:
        text += (f"\n{r.left_out} tool-use prompts were left out: export with --tool-agent to train them with "
                 "verl's tool agent.\n")
    mpl = r.lengths.get("max_prompt_length", 2048)
    return text + _OBJECTIVES.format(module=verl_bundle.OBJECTIVE_MODULE) + _COMMAND.format(out=out, max_prompt_length=mpl,
                                  multi_turn=_MULTI_TURN.format(out=out) if tools else "")
