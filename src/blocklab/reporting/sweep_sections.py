"""The report's two sections about the whole sweep rather than one experiment: the gain trajectories of every run
that logs gains, and the init probes of DIR/probes (drawn by `blocklab probe`, copied into the figures)."""

from __future__ import annotations

from pathlib import Path

from blocklab.reporting import claims
from blocklab.reporting import figures as F
from blocklab.reporting.parts import Figure, Section
from blocklab.reporting.runs import Run


def gains_section(runs: list[Run], fig_dir: Path) -> Section:
    """Every trainable gain of each run that logs some, against the step; the runs without any, named."""
    gains = Section("gains", "Gain trajectories")
    for r in runs:
        if r.has_gains:
            path = F.plot_run_gains(
                r, fig_dir / f"gains_{F.slug(r.name.removeprefix('runs/') if r.name != '.' else r.label)}.png"
            )
            if path:
                caption = f"Every trainable gain of {r.label} ({r.block}) against the step, layers coloured. "
                gains.figures.append(
                    Figure(path, f"Gains during training: {r.label}", caption + claims.gains_sentence(r))
                )
    without = [r.label for r in runs if not r.has_gains]
    if without:
        gains.paragraphs.append(
            "No trainable gains logged for: "
            + ", ".join(without)
            + " (blocks without shaped attention or gain scalars have none)."
        )
    return gains


def probe_section(root: Path, fig_dir: Path) -> Section | None:
    """The init probes' figures, each captioned with what its numbers say, and their table; None without probes."""
    probes = F.probe_figures(root, fig_dir)
    if not probes:
        return None
    return Section(
        "init-probes",
        "Signal propagation at initialisation (blocklab probe)",
        paragraphs=[
            "Measured on freshly initialised models of several depths; the papers' predictions are drawn dashed."
        ],
        figures=[Figure(p, t, _probe_caption(root, p, c)) for p, t, c in probes],
        pre=_probe_table(root),
    )


def _probe_table(root: Path) -> str | None:
    src = F.probes_dir(root)
    result = F.load_probes(src) if src else None
    if not result:
        return None
    try:
        from blocklab.probes import format_table

        return format_table(result)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


def _probe_caption(root: Path, png: Path, caption: str) -> str:
    """The figure's fixed description, then what its numbers say (blocklab.reporting.claims)."""
    src = F.probes_dir(root)
    result = F.load_probes(src) if src else None
    name = png.name.removeprefix("probes_").removesuffix(".png")
    return f"{caption} {claims.probe_sentences(result).get(name, '')}".strip() if result else caption
