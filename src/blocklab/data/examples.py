"""Labelled examples for `task="classification"` (docs/models.md#data): one text or a text pair
and a label, from an embedded code task (data/codetasks/) or GLUE-layout data (data/glue.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    text: str
    label: int | float  # a class index, or the target of a regression (n_labels = 1)
    text_pair: str | None = None
    doc: str = ""  # where it came from (a file for code tasks, "row N" for tables)
    group: str = ""  # examples made from one function (its correct and mutated versions):
    # kept or left out together; "" = the example alone


@dataclass
class LabelledData:
    """A classification task's two splits, its labels and how it is scored."""

    name: str
    train: list[Example]
    val: list[Example]
    label_names: list[str] | None  # None: regression, one output
    metric: str  # a key of data.scores.METRICS
    info: dict = field(default_factory=dict)  # counts for the log and summary.json

    @property
    def n_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)
