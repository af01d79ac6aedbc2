"""Signal-propagation probes (docs/models.md#signal-propagation-probes): gains during training, signal statistics at
init.

- `gain_values(model)`: every gain as flat keys (`L0.alpha.h0`, `L3.beta_ff`, ...), for the trainer.
- `plot_gains(records, path)`: gain trajectories from metrics.jsonl records.
- `run_init_probes(blocks, depths, batches, ...)`: hidden-state norms, gradient norms, last-FFN
  gradient vs depth and token cosine similarity at init, with the papers' predictions.
- `probe_model(model, batches)`: the same measurements on any one model (public API only).
- `plot_all(result, out_dir)` and `plot_*`: the PNG figures.
"""

from blocklab.lazy import lazy_exports

__all__ = [
    "gain_values",
    "plot_gains",
    "run_init_probes",
    "random_batches",
    "format_table",
    "write_json",
    "probe_model",
    "probe_batch",
    "hidden_sq_norms",
    "cosine_similarities",
    "plot_all",
    "plot_hidden_norms",
    "plot_grad_norms",
    "plot_last_ffn_grad",
    "plot_cosine",
    "FIGURES",
    "layernorm_jacobian_norm",
    "lemma2_bounds",
]

# Imported on first use: the probes bring torch and matplotlib, which `blocklab probe --help` does not need.
_LAZY = {
    "gain_values": "gains",
    "plot_gains": "gains",
    "format_table": "init_probes",
    "random_batches": "init_probes",
    "run_init_probes": "init_probes",
    "write_json": "init_probes",
    "cosine_similarities": "measure",
    "hidden_sq_norms": "measure",
    "probe_batch": "measure",
    "probe_model": "measure",
    "FIGURES": "plots",
    "plot_all": "plots",
    "plot_cosine": "plots",
    "plot_grad_norms": "plots",
    "plot_hidden_norms": "plots",
    "plot_last_ffn_grad": "plots",
    "layernorm_jacobian_norm": "predictions",
    "lemma2_bounds": "predictions",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
