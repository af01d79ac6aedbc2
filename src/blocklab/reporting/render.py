"""Render a Report as one self-contained HTML page (inline CSS, PNGs as base64 data URIs) and as Markdown.

The page: the settings every run shares, once; then each part (reporting/parts.py) with its tables and
figures, under its experiment's heading when the sweep names experiments; then the sections about the
whole sweep (init probes, gains, downstream). Tables list runs by family, then block.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from blocklab.reporting.analysis import families, format_row, table_columns
from blocklab.reporting.groups import format_group_row, group_columns
from blocklab.reporting.parts import Table
from blocklab.reporting.settings import settings_lines

CSS = """
:root { --fg: #1d2430; --muted: #5b6472; --line: #d9dee5; --bg-alt: #f6f8fa; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); max-width: 1180px; margin: 2rem auto; padding: 0 1.2rem; }
h1 { font-size: 1.7rem; margin-bottom: .2rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1.05rem; margin-top: 1.6rem; }
p.description { font-size: 1.05rem; color: var(--muted); margin-top: 0; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; font-size: .9rem; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; }
table { border-collapse: collapse; font-size: .88rem; margin: .8rem 0; width: 100%; }
th, td { border: 1px solid var(--line); padding: .3rem .55rem; }
th { background: var(--bg-alt); text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.block { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
tr.family-start td { border-top: 2px solid #9aa3ad; }
table.settings th { width: 5rem; } table.settings td { font-size: .82rem; }
p.target { font-size: .88rem; color: var(--muted); }
tr.status-diverged td.status, tr.status-stalled td.status, tr.status-mixed td.status { color: #b3261e; font-weight: 600; }
tr.status-running-unknown td.status, tr.status-interrupted td.status, tr.status-not-started td.status { color: #8a5a00; }
span.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .35em;
              vertical-align: -.05em; }
figure { margin: 1.2rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { font-size: .85rem; color: var(--muted); }
ul.notes { font-size: .88rem; color: var(--muted); }
pre { background: var(--bg-alt); padding: .7rem; overflow-x: auto; font-size: .8rem; }
details { margin: .3rem 0; } summary { cursor: pointer; }
"""

_NUMERIC = {"params", "tokens_per_s", "final_loss", "final_eval_loss", "best_eval_loss", "steps_to_target"}


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _table_html(rows: list[dict], grouped: bool = False, suffix: str = "") -> str:
    """A runs table, or with `grouped` the seed groups' mean ± sd; a thicker line where a family begins."""
    from blocklab.reporting.figures import block_colour

    cols = group_columns(rows) if grouped else table_columns(rows)
    several = len(families(rows)) > 1
    head = "".join(f"<th>{_e(h)}</th>" for _, h in cols)
    body = []
    previous = None
    for row in rows:
        f = format_group_row(row) if grouped else format_row(row)
        cells = []
        for key, _ in cols:
            text = _e(f[key])
            if key == "block":
                text = f'<span class="swatch" style="background:{block_colour(row["block"])}"></span>{text}'
            cls = "num" if key in _NUMERIC else ("status" if key == "status_text" else key)
            cells.append(f'<td class="{cls}">{text}</td>')
        status = (row["statuses"][0] if len(set(row["statuses"])) == 1 else "mixed") if grouped else row["status"]
        status = status.replace("/", "-").replace(" ", "-")
        family = row.get("family", "")
        start = " family-start" if several and previous is not None and family != previous else ""
        previous = family
        key = "group" if grouped else "run"
        body.append(
            f'<tr class="status-{_e(status)}{start}" data-{key}="{_e(row[key])}" '
            f'data-family="{_e(family)}">{"".join(cells)}</tr>'
        )
    table_id = ("groups" if grouped else "runs") + suffix
    return (
        f'<table id="{_e(table_id)}"><thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(body) + "\n</tbody></table>"
    )


def _settings_html(shared: dict, usual: dict | None = None) -> str:
    rows = "".join(f"<tr><th>{_e(sec)}</th><td>{_e(text)}</td></tr>" for sec, text in settings_lines(shared, usual))
    return f'<table class="settings"><tbody>{rows}</tbody></table>'


def _figure_html(fig) -> str:
    cap = (
        f"<figcaption><b>{_e(fig.title)}.</b> {_e(fig.caption)}</figcaption>"
        if fig.caption
        else f"<figcaption><b>{_e(fig.title)}</b></figcaption>"
    )
    return f'<figure><img src="{data_uri(fig.path)}" alt="{_e(fig.title)}">{cap}</figure>'


def _configs_html(report) -> str:
    parts = []
    for r in report.runs:
        cfg = r.path / "config.toml"
        if r.exists and cfg.is_file():
            parts.append(
                f"<details><summary>{_e(r.label)} <code>{_e(r.name)}</code></summary>"
                f"<pre>{_e(cfg.read_text(errors='replace'))}</pre></details>"
            )
    return "\n".join(parts)


def _text_table_html(t) -> str:
    """A parts.Table as an HTML table (never its Markdown pipes in a <pre>), its notes under it."""
    head = "".join(f"<th>{_e(c)}</th>" for c in t.columns)
    body = "\n".join(
        "<tr>"
        + "".join(f'<td class="num">{_e(c)}</td>' if i in t.numeric else f"<td>{_e(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in t.rows
    )
    notes = "".join(f'<p class="target">{_e(n)}</p>' for n in t.notes)
    return f'<table id="{_e(t.id)}"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>{notes}'


def _text_table_md(t) -> list[str]:
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(c) for c in t.columns) + " |",
        "|" + "|".join("---:" if i in t.numeric else "---" for i in range(len(t.columns))) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    return lines + [""] + [x for n in t.notes for x in (n, "")]


def pipe_table(text: str | None, table_id: str = "") -> Table | None:
    """A preformatted block that is a Markdown pipe table (a header, a |---| line, rows) as a Table, so that
    the page draws it as a table rather than showing its pipes; None for any other text."""
    lines = [x.strip() for x in (text or "").strip().splitlines()]
    if len(lines) < 2 or not all(x.startswith("|") and x.endswith("|") for x in lines):
        return None
    if not set(lines[1]) <= set("|-: "):
        return None

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line[1:-1].split("|")]

    head = cells(lines[0])
    rows = [cells(x) for x in lines[2:]]
    if any(len(r) != len(head) for r in rows):
        return None
    numeric = tuple(i for i, c in enumerate(cells(lines[1])) if c.endswith(":"))
    return Table(table_id, head, rows, numeric=numeric)


def _sections_html(sections, h: str) -> list[str]:
    out = []
    for s in sections:
        out.append(f'<{h} id="{_e(s.id)}">{_e(s.title)}</{h}>')
        out.extend(f"<p>{_e(p)}</p>" for p in s.paragraphs)
        out.extend(_figure_html(f) for f in s.figures)
        out.extend(_text_table_html(t) for t in s.tables)
        if s.items:
            out.append("<ul>" + "".join(f"<li>{_e(i)}</li>" for i in s.items) + "</ul>")
        if s.pre:
            table = pipe_table(s.pre, f"{s.id}-table")
            out.append(_text_table_html(table) if table else f"<pre>{_e(s.pre)}</pre>")
    return out


def _part_html(report, part) -> list[str]:
    """An experiment's heading, description, own settings, tables, target and figures."""
    out = [f'<h2 id="{_e(part.name("experiment", "-"))}">{_e(part.title)}</h2>']
    if part.description:
        out.append(f"<p>{_e(part.description)}</p>")
    if part.shared or part.usual:
        out.append("<p><b>Settings of this experiment</b> (shared by its runs, beyond those above):</p>")
        out.append(_settings_html(part.shared, part.usual))
    if part.seeded:
        out.append(f'<h3 id="{_e(part.name("groups-summary", "-"))}">Runs: mean ± sd over seeds</h3>')
        out.append(_table_html(part.group_rows, grouped=True, suffix=part.name("", "-")))
    out.append(f'<h3 id="{_e(part.name("summary", "-"))}">Runs</h3>')
    out.append(_table_html(part.rows, suffix=part.name("", "-")))
    out.append(f'<p class="target">{_e(part.target.note)}</p>')
    return out + _sections_html([s for s in report.sections if s.part == part.id], "h3")


def to_html(report) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_e(report.title)}</h1>",
    ]
    if report.description:
        out.append(f'<p class="description">{_e(report.description)}</p>')
    out.append('<dl class="meta">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.meta) + "</dl>")
    usual = None if report.experiments else report.parts[0].usual  # each experiment lists its own
    if report.shared or usual:
        out.append('<h2 id="settings">Settings shared by every run</h2>')
        out.append(_settings_html(report.shared, usual))
    notes = '<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>"
    if report.experiments:
        out.append(notes)
        for part in report.parts:
            out.extend(_part_html(report, part))
        out.extend(_sections_html([s for s in report.sections if s.part is None], "h2"))
    else:  # one part: the page as it was before experiments
        part = report.parts[0]
        if part.seeded:
            out.append('<h2 id="groups-summary">Runs: mean ± sd over seeds</h2>')
            out.append(_table_html(part.group_rows, grouped=True))
        out.append('<h2 id="summary">Runs</h2>')
        out.append(_table_html(part.rows))
        out.append(notes)
        out.extend(_sections_html(report.sections, "h2"))
    configs = _configs_html(report)
    if configs:
        out.append('<h2 id="configs">Run configurations</h2>')
        out.append(configs)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _settings_md(shared: dict, usual: dict | None = None) -> list[str]:
    return [f"- **{sec}**: {text}" for sec, text in settings_lines(shared, usual)] + [""]


def _sections_md(report, sections, h: str) -> list[str]:
    out = []
    for s in sections:
        out += [f"{h} {s.title}", ""]
        for p in s.paragraphs:
            out += [p, ""]
        for f in s.figures:
            rel = Path(f.path).relative_to(report.root).as_posix()
            out += [f"![{f.title}]({rel})", ""]
            if f.caption:
                out += [f"*{f.caption}*", ""]
        for t in s.tables:
            out += _text_table_md(t)
        if s.items:
            out += [f"- {i}" for i in s.items] + [""]
        if s.pre:
            out += [s.pre.strip(), ""] if pipe_table(s.pre) else ["```", s.pre, "```", ""]
    return out


def to_markdown(report) -> str:
    out = [f"# {report.title}", ""]
    if report.description:
        out += [report.description, ""]
    out += [f"- **{k}**: {v}" for k, v in report.meta] + [""]
    usual = None if report.experiments else report.parts[0].usual  # each experiment lists its own
    if report.shared or usual:
        out += ["## Settings shared by every run", ""] + _settings_md(report.shared, usual)
    notes = [f"- {n}" for n in report.notes] + [""]
    if report.experiments:
        out += notes
        for part in report.parts:
            out += [f"## {part.title}", ""] + ([part.description, ""] if part.description else [])
            if part.shared or part.usual:
                out += ["Settings of this experiment (shared by its runs, beyond those above):", ""]
                out += _settings_md(part.shared, part.usual)
            if part.seeded:
                out += ["### Runs: mean ± sd over seeds", "", part.group_table_md, ""]
            out += ["### Runs", "", part.table_md, "", part.target.note, ""]
            out += _sections_md(report, [s for s in report.sections if s.part == part.id], "###")
        out += _sections_md(report, [s for s in report.sections if s.part is None], "##")
    else:  # one part: the page as it was before experiments
        if report.seeded:
            out += ["## Runs: mean ± sd over seeds", "", report.group_table_md, ""]
        out += ["## Runs", "", report.table_md, ""] + notes
        out += _sections_md(report, report.sections, "##")
    out += ["## Run folders", ""] + [
        f"- {r.label}: `{r.name}`" + ("" if r.exists else " (not started)") for r in report.runs
    ]
    return "\n".join(out) + "\n"
