"""A report section's preformatted Markdown table (gradient norms, probes) is drawn as a table on the page."""

from blocklab.reporting import render
from blocklab.reporting.parts import Section

GRAD = """| run | block | layers | mlp.fc2 last/first layer: init | after warm-up | end |
|---|---|---:|---|---|---|
| Post-LN, seed 0 | post-ln | 6 | 1.06 (step 1) | 0.841 (step 50) | 0.831 (step 1000) |
| Pre-LN, seed 0 | pre-ln | 6 | 0.448 (step 1) | no warm-up | 0.386 (step 1000) |"""


def test_a_pipe_table_is_parsed_with_its_numeric_columns():
    t = render.pipe_table(GRAD, "g")
    assert t.columns[:3] == ["run", "block", "layers"] and t.numeric == (2,)
    assert t.rows[1] == ["Pre-LN, seed 0", "pre-ln", "6", "0.448 (step 1)", "no warm-up", "0.386 (step 1000)"]


def test_other_preformatted_text_stays_preformatted():
    assert render.pipe_table("block   depth   ratio\npre-ln  4  1.0") is None
    assert render.pipe_table("| a | b |\n| 1 | 2 |") is None  # no separator line: not a table
    assert render.pipe_table("| a | b |\n|---|---|\n| 1 |") is None  # ragged


def test_the_page_draws_a_table_and_the_markdown_keeps_its_pipes_unfenced():
    s = Section("grad-norms", "Gradient norms", pre=GRAD)
    page = "\n".join(render._sections_html([s], "h2"))
    assert '<table id="grad-norms-table">' in page and "<td>Post-LN, seed 0</td>" in page
    assert "|---" not in page and "<pre>" not in page
    plain = render._sections_html([Section("p", "Probes", pre="block  ratio\npre-ln 1.0")], "h2")
    assert "<pre>block  ratio\npre-ln 1.0</pre>" in plain


def test_markdown_writes_the_table_without_a_code_fence():
    md = render._sections_md(None, [Section("grad-norms", "Gradient norms", pre=GRAD)], "##")
    text = "\n".join(md)
    assert "```" not in text and GRAD in text
