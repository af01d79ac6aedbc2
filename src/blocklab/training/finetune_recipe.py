"""The fine-tuning recipe (`blocklab finetune`), apart from the trainer so that the command line's --help and
argument errors can print it without importing torch. He & Hofmann fine-tune with AdamW at a small rate, a
10% warm-up then linear decay, for a few epochs."""

FINETUNE_TRAIN = {
    "optimizer": "adamw",
    "lr": 1e-4,
    "schedule": "linear",
    "batch_size": 32,
    "weight_decay": 0.01,
    "beta1": 0.9,
    "beta2": 0.999,
    "grad_clip": 1.0,
    "divergence_factor": 10.0,
    "stall_patience": 0,
}
EPOCHS = 5
WARMUP = 0.1
