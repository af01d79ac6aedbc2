"""The warm-up heat map: one panel per block, and per block and optimizer where the optimizer varies."""

from types import SimpleNamespace

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
    assert plot_warmup_heatmap(grid_of(["adam", "sgd"]), tmp_path / "h.png").stat().st_size > 0
