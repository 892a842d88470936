"""A folder of pages as document records: every `.txt`, `.md` and `.html` (`.htm`) file under
it, in path order, becomes `{id, title, text[, kind]}` for generators/corpus/passages.py.

  id     the file's path inside the folder (`people/ada.md`), so ids stay put across reruns
  title  `.md`: its first `# heading`; `.html`: its <title>, else its first <h1>; else (and
         for `.txt`) the file name without its extension, `_` and `-` read as spaces
  text   the file's text; HTML is turned into text with the standard library's html.parser
         (script, style and head left out, a paragraph break after each block element)
  kind   the first folder of the path when the file is in a subfolder (`people`)

A file that cannot be read, is not UTF-8 or holds no text comes back as a record with an
error and its path, so the caller reports it and imports the rest.

    for rec in iter_folder(Path("pages")):
        rec.where, rec.record, rec.error     # "people/ada.md", {...}, None
"""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

from storage.userfiles import RawRecord

SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm")
BLOCKS = {"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "section",
          "article", "header", "footer", "blockquote", "pre", "dd", "dt", "hr", "main", "nav", "figure"}
SKIP = {"script", "style", "head", "noscript", "template", "svg"}
_MD_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.M)


class _Text(HTMLParser):
    """Visible text, <title> and the first <h1> of an HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title, self.h1 = "", ""
        self._skip, self._in = 0, ""

    def handle_starttag(self, tag, attrs):
        if tag in SKIP:
            self._skip += 1
        if tag in ("title", "h1"):
            self._in = tag
        if tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in SKIP and self._skip:
            self._skip -= 1
        if tag == self._in:
            self._in = ""
        if tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self._in == "title" and not self.title:
            self.title = " ".join(data.split())
        elif self._in == "h1" and not self.h1:
            self.h1 = " ".join(data.split())
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML page."""
    p = _Text()
    p.feed(html)
    p.close()
    paragraphs = (" ".join(x.split()) for x in "".join(p.parts).split("\n\n"))
    return p.title or p.h1, "\n\n".join(x for x in paragraphs if x)


def _name_title(path: Path) -> str:
    return " ".join(re.split(r"[_\-\s]+", path.stem)).strip()


def page_record(path: Path, rel: Path) -> dict:
    """The document record of one file (ValueError with the reason when it cannot be read)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read: {e.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    title = ""
    if path.suffix.lower() in (".html", ".htm"):
        title, text = html_text(text)
    elif path.suffix.lower() in (".md", ".markdown"):
        m = _MD_HEADING.search(text)
        if m:
            title = m.group(1).strip()
            text = text[:m.start()] + text[m.end():]
    if not text.strip():
        raise ValueError("no text")
    rec = {"id": rel.as_posix(), "title": title or _name_title(path), "text": text.strip()}
    if len(rel.parts) > 1:
        rec["kind"] = rel.parts[0]
    return rec


def pages(folder: Path) -> list[Path]:
    """The page files under `folder`, in path order (hidden files and folders left out)."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file()
                  and not any(s.startswith(".") for s in p.relative_to(folder).parts))


def folder_digest(folder: Path) -> str:
    """A hash of the page files' paths and contents (a run id for the folder as it is now)."""
    h = hashlib.sha256()
    for p in pages(folder):
        h.update(p.relative_to(folder).as_posix().encode() + b"\x1f")
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"\x00unreadable")
        h.update(b"\x1e")
    return h.hexdigest()


def iter_folder(folder: Path) -> Iterator[RawRecord]:
    """One RawRecord per page file, `where` its path inside the folder."""
    for p in pages(folder):
        rel = p.relative_to(folder)
        try:
            rec = page_record(p, rel)
        except ValueError as e:
            yield RawRecord(rel.as_posix(), None, str(e))
            continue
        yield RawRecord(rel.as_posix(), rec, None, rec["id"])
