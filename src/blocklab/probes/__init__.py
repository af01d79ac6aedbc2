"""Signal-propagation probes (SPEC.md section 8): gains during training, signal statistics at init.

- `gain_values(model)`: every gain as flat keys (`L0.alpha.h0`, `L3.beta_ff`, ...), for the trainer.
- `plot_gains(records, path)`: gain trajectories from metrics.jsonl records.
- `run_init_probes(blocks, depths, batches, ...)`: hidden-state norms, gradient norms, last-FFN
  gradient vs depth and token cosine similarity at init, with the papers' predictions.
- `probe_model(model, batches)`: the same measurements on any one model (public API only).
- `plot_all(result, out_dir)` and `plot_*`: the PNG figures.
"""

from blocklab.probes.gains import gain_values, plot_gains
from blocklab.probes.init_probes import format_table, random_batches, run_init_probes, write_json
from blocklab.probes.measure import cosine_similarities, hidden_sq_norms, probe_batch, probe_model
from blocklab.probes.plots import FIGURES, plot_all, plot_cosine, plot_grad_norms, plot_hidden_norms, plot_last_ffn_grad
from blocklab.probes.predictions import layernorm_jacobian_norm, lemma2_bounds

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
