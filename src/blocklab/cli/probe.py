"""blocklab probe --blocks post-ln,pre-ln,sas,sas-p --depths 2,4,8,16,32 --out DIR [...]

The options and the work are the library's (blocklab.probes.runner): a sweep's [probes] table runs them too.
"""

from __future__ import annotations

from blocklab.cli.bench import WrappingHelpFormatter
from blocklab.probes.runner import add_arguments, run  # torch-free: run imports torch and the probes


def add_parser(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="signal propagation at initialisation: hidden norms, gradients, rank collapse",
        description="Build every block at every depth (fresh initialisation, several seeds), run a few batches "
        "forward and backward, and measure per layer: the squared hidden-state norm (Xiong et al. "
        "Lemma 2), the gradient norm of every weight (their Fig. 3 a/b), the gradient of the last "
        "FFN output weight against depth with its fitted log-log slope (Theorem 1) and the mean "
        "pairwise cosine similarity between tokens (rank collapse); and, against depth, how far one "
        "first Adam step moves the logits (DeepNet's model update, bounded for DeepNorm). Writes "
        "DIR/probes.json and "
        "PNG figures with the papers' predictions drawn dashed, and prints a summary table.",
        epilog="Example: blocklab probe --init xavier --norm layernorm --d-model 128 --d-ff 512 --out probes/",
        formatter_class=WrappingHelpFormatter,  # never breaks a block name at its hyphen
    )
    add_arguments(p)
    p.set_defaults(func=run)
