"""`forgeplay serve-retriever`: a dataset's index served over Search-R1's retrieval API
(generators/tools/retriever_server.py), so synthesis, validation, self-play, evaluation and a
verl run can all search one index with `--retriever http://HOST:PORT/retrieve`."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field

import typer

from storage.configcli import config_command


@dataclass
class ServeRetrieverConfig:
    """What `forgeplay serve-retriever` serves, and where."""

    dataset: str = field(default="demo", metadata={"help": "dataset whose documents are indexed"})
    retriever: str = field(default="bm25", metadata={"help": "the index to serve: bm25, dense or hybrid"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to bind"})
    port: int = field(default=8001, metadata={"help": "port to bind (0: a free one)"})

    def __post_init__(self) -> None:
        if self.retriever not in ("bm25", "dense", "hybrid"):
            raise ValueError(f"--retriever must be bm25, dense or hybrid, not {self.retriever!r}")
        if not 0 <= self.port < 65536:
            raise ValueError(f"--port must be from 0 to 65535, not {self.port}")


def register(app: typer.Typer) -> None:
    @config_command(app, "serve-retriever", ServeRetrieverConfig, errors=(ValueError, OSError))
    def serve_retriever(cfg: ServeRetrieverConfig, data_root=None) -> None:
        """Serve a dataset's documents as a retrieval server (POST /retrieve with `queries`,
        `topk`, `return_scores`, as Search-R1's retrieval server, and `columns` for ids and
        float32 scores alone; GET /info gives the index fingerprint) until Ctrl-C or SIGTERM.
        Prints the URL to pass as `--retriever`."""
        from generators.tools.retriever import Corpus, build, index_dir
        from generators.tools.retriever_server import RetrieverServer
        from storage import load_table, resolve_root
        from storage.reader import require_rows

        root = resolve_root(data_root)
        require_rows(root, cfg.dataset, "documents", "--dataset")
        corpus = Corpus.of(load_table(cfg.dataset, "documents", root, columns=["doc_id", "title", "text"]))
        retriever = build(cfg.retriever, corpus, index_dir=index_dir(root))
        server = RetrieverServer(retriever, corpus, cfg.host, cfg.port)
        typer.echo(f"serving {cfg.retriever} over {len(corpus.doc_ids)} documents of {cfg.dataset} "
                   f"(fingerprint {retriever.fingerprint}) at {server.url}", err=False)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
