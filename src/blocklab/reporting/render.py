"""Render a Report as one self-contained HTML page (inline CSS, PNGs as base64 data URIs) and as Markdown."""
from __future__ import annotations

import base64
import html
from pathlib import Path

from blocklab.reporting.analysis import format_row, table_columns
from blocklab.reporting.groups import format_group_row, group_columns

CSS = """
:root { --fg: #1d2430; --muted: #5b6472; --line: #d9dee5; --bg-alt: #f6f8fa; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); max-width: 1180px; margin: 2rem auto; padding: 0 1.2rem; }
h1 { font-size: 1.7rem; margin-bottom: .2rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
p.description { font-size: 1.05rem; color: var(--muted); margin-top: 0; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; font-size: .9rem; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; }
table { border-collapse: collapse; font-size: .88rem; margin: .8rem 0; width: 100%; }
th, td { border: 1px solid var(--line); padding: .3rem .55rem; }
th { background: var(--bg-alt); text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.block { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
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


def _table_html(report, grouped: bool = False) -> str:
    """The runs table, or with `grouped` the seed groups' mean ± sd."""
    from blocklab.reporting.figures import block_colour

    rows = report.group_rows if grouped else report.rows
    cols = group_columns(rows) if grouped else table_columns(rows)
    head = "".join(f"<th>{_e(h)}</th>" for _, h in cols)
    body = []
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
        key = "group" if grouped else "run"
        body.append(f'<tr class="status-{_e(status)}" data-{key}="{_e(row[key])}">{"".join(cells)}</tr>')
    return (f'<table id="{"groups" if grouped else "runs"}"><thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody></table>")


def _figure_html(fig) -> str:
    cap = f"<figcaption><b>{_e(fig.title)}.</b> {_e(fig.caption)}</figcaption>" if fig.caption else \
        f"<figcaption><b>{_e(fig.title)}</b></figcaption>"
    return f'<figure><img src="{data_uri(fig.path)}" alt="{_e(fig.title)}">{cap}</figure>'


def _configs_html(report) -> str:
    parts = []
    for r in report.runs:
        cfg = r.path / "config.toml"
        if r.exists and cfg.is_file():
            parts.append(f"<details><summary>{_e(r.label)} <code>{_e(r.name)}</code></summary>"
                         f"<pre>{_e(cfg.read_text(errors='replace'))}</pre></details>")
    return "\n".join(parts)


def to_html(report) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(report.title)}</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>{_e(report.title)}</h1>"]
    if report.description:
        out.append(f'<p class="description">{_e(report.description)}</p>')
    out.append('<dl class="meta">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.meta) + "</dl>")
    if report.seeded:
        out.append('<h2 id="groups-summary">Runs: mean ± sd over seeds</h2>')
        out.append(_table_html(report, grouped=True))
    out.append('<h2 id="summary">Runs</h2>')
    out.append(_table_html(report))
    out.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>")
    for s in report.sections:
        out.append(f'<h2 id="{_e(s.id)}">{_e(s.title)}</h2>')
        out.extend(f"<p>{_e(p)}</p>" for p in s.paragraphs)
        out.extend(_figure_html(f) for f in s.figures)
        if s.pre:
            out.append(f"<pre>{_e(s.pre)}</pre>")
    configs = _configs_html(report)
    if configs:
        out.append('<h2 id="configs">Run configurations</h2>')
        out.append(configs)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def to_markdown(report) -> str:
    out = [f"# {report.title}", ""]
    if report.description:
        out += [report.description, ""]
    out += [f"- **{k}**: {v}" for k, v in report.meta] + [""]
    if report.seeded:
        out += ["## Runs: mean ± sd over seeds", "", report.group_table_md, ""]
    out += ["## Runs", "", report.table_md, ""]
    out += [f"- {n}" for n in report.notes] + [""]
    for s in report.sections:
        out += [f"## {s.title}", ""]
        for p in s.paragraphs:
            out += [p, ""]
        for f in s.figures:
            rel = Path(f.path).relative_to(report.root).as_posix()
            out += [f"![{f.title}]({rel})", ""]
            if f.caption:
                out += [f"*{f.caption}*", ""]
        if s.pre:
            out += ["```", s.pre, "```", ""]
    out += ["## Run folders", ""] + [f"- {r.label}: `{r.name}`" + ("" if r.exists else " (not started)")
                                     for r in report.runs]
    return "\n".join(out) + "\n"
