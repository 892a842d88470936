"""Corpora: the fictional "world" encyclopedia with multi-hop question triples, and the
importer for HotpotQA / 2WikiMultihopQA / plain JSONL and Parquet question sets.

Both write `documents` and `triples` records (storage/schemas/*.json). From the shell:

    forgeplay corpus world --seed 7 --entities 2000 --dataset world7
    forgeplay corpus import hotpot_dev.json --dataset hotpot

Modules: names (syllable names), relations (vocabulary, question phrasing), templates
(sentence templates shared by renderer and parser), world (entities), render (documents),
questions and rules (triples), derive (parse facts back from text and re-run a triple's
program), build (world -> rows -> shards), readers and importer (outside question sets),
ids (stable ids), runs (run records beside the data).
"""
