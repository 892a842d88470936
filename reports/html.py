"""The report page: sections of text, tables and embedded images, rendered with one Jinja2
template (autoescaped) into a single HTML file with its styles inline and no scripts.

    page = render("run-3f2a", [Section("Stages", tables=[Table(["stage", "seconds"], [["sft", 12.3]])])])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jinja2 import Environment

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 64em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: 0.2em 0; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
p.absent { color: #777; font-style: italic; }
</style></head>
<body>
<h1>{{ title }}</h1>
{% for line in intro %}<p>{{ line }}</p>
{% endfor %}
{% for s in sections %}<section id="{{ s.key }}">
<h2>{{ s.title }}</h2>
{% if s.absent %}<p class="absent">{{ s.absent }}</p>
{% endif %}{% for line in s.notes %}<p>{{ line }}</p>
{% endfor %}{% for img in s.images %}<img alt="{{ img.alt }}" src="{{ img.src }}">
{% endfor %}{% for t in s.tables %}<table id="table-{{ t.key }}">{% if t.caption %}<caption>{{ t.caption }}</caption>{% endif %}
<thead><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}<tr>{% for v in row %}<td{% if v is number %} class="num"{% endif %}>{{ fmt(v) }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endfor %}</section>
{% endfor %}</body></html>
"""


@dataclass
class Table:
    columns: list[str]
    rows: list[list]
    key: str = ""  # the table's HTML id
    caption: str = ""


@dataclass
class Image:
    alt: str
    src: str  # a data: URI


@dataclass
class Section:
    """One part of the page (key: its HTML id); `absent` (one line) when the run has no data for it."""

    key: str = ""
    title: str = ""
    notes: list[str] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    absent: str = ""


def fmt(v) -> str:
    """A cell as text: floats with 4 significant digits, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


_ENV = Environment(autoescape=True)


def render(title: str, sections: list[Section], intro: list[str] = ()) -> str:
    """The whole page as text."""
    return _ENV.from_string(TEMPLATE).render(title=title, sections=sections, intro=list(intro), fmt=fmt)
