"""Producers of raw data: LLM backends (`generators.llm`), corpora (synthetic world and
importers), virtual tools with their BM25 simulator, and ToolForge-style trajectory synthesis.

Imports only `storage` from the project.
"""
