"""ToolForge-style synthesis of multi-hop tool-calling trajectories with self-reflection:
plan (route from the triple's structure, case from a mix), skeleton (program-built calls,
errors and simulator results), think (the LLM's reasoning and answer wording), assemble
(the `trajectories` row), synthesize (the whole run as plain functions).
"""
