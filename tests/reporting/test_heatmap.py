"""The warm-up heat map: one panel per block, and per block and optimizer where the optimizer varies."""

from types import SimpleNamespace

from blocklab.reporting import figures
from blocklab.reporting.heatmap import plot_warmup_heatmap, warmup_grid


def pair(block, optimizer, warmup, lr, loss):
    cfg = {"train": {"optimizer": optimizer, "warmup_steps": warmup, "lr": lr}}
    run = SimpleNamespace(cfg=lambda section, key: cfg[section][key])
    return SimpleNamespace(block=block, runs=[run]), {"final_loss": loss, "statuses": ["completed"]}


def grid_of(optimizers):
    return [
        pair(b, o, w, lr, 5.0 + w / 100)
        for b in ("post-ln", "pre-ln")
        for o in optimizers
        for w in (0, 12)
        for lr in (1e-3, 5e-3 if o == "sgd" else 5e-4)
    ]


def test_one_panel_per_block_with_one_optimizer():
    assert set(warmup_grid(grid_of(["adam"]))) == {"post-ln", "pre-ln"}


def test_sgd_and_adam_share_a_rate_yet_get_panels_of_their_own(tmp_path):
    grid = warmup_grid(grid_of(["adam", "sgd"]))
    assert set(grid) == {"post-ln, adam", "post-ln, sgd", "pre-ln, adam", "pre-ln, sgd"}
    assert all(len(cells) == 4 for cells in grid.values())  # lr 1e-3 of Adam and of SGD never share a cell


def test_each_panel_shows_its_cells_losses(tmp_path, monkeypatch):
    """The figure itself, not only its file: one titled panel per block and optimizer, the losses
    in the image at (warm-up, rate) and written in the cells."""
    saved = []
    monkeypatch.setattr(
        figures, "save_figure", lambda fig, path, real=figures.save_figure: (saved.append(fig), real(fig, path))[1]
    )
    path = plot_warmup_heatmap(grid_of(["adam", "sgd"]), tmp_path / "h.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    panels = [ax for ax in saved[0].axes if ax.get_visible() and ax.get_images()]
    assert [ax.get_title() for ax in panels] == ["post-ln, adam", "post-ln, sgd", "pre-ln, adam", "pre-ln, sgd"]
    for ax in panels:
        rates = [t.get_text() for t in ax.get_xticklabels()]
        assert rates == ["0.0005", "0.001", "0.005"] and [t.get_text() for t in ax.get_yticklabels()] == ["0", "12"]
        data = ax.get_images()[0].get_array()
        # the loss is 5 + warmup / 100 in every cell the optimizer ran; the rate it did not run is blank
        ran = [j for j in range(3) if not data.mask[0, j]]
        assert len(ran) == 2 and data[0, ran].tolist() == [5.0, 5.0] and data[1, ran].tolist() == [5.12, 5.12]
        assert sorted(t.get_text() for t in ax.texts) == ["5.00", "5.00", "5.12", "5.12"]
