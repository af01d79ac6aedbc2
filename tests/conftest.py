import os
import shutil
import sysconfig
from pathlib import Path

import pytest

from tests.durations import load as load_durations
from tests.durations import longest_first

# One thread per process, set before torch is imported so that subprocesses (the CLI runs, torchrun's
# workers) inherit it: the models here are tiny and gain nothing from threads, while idle OpenMP
# threads that spin on a shared 2-core machine made one 20-step run 30x slower (98 vs 3400 tokens/s).
# A test about thread counts sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Without a GPU the fused shaped-attention kernel runs through Triton's interpreter. The variable
# is read when a kernel is defined, so it must be set before any test module imports blocklab.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:
    # One tile configuration per fused kernel: the kernel tests span ~240 autotuning keys, and
    # autotuning each would compile every candidate (thousands of builds). The autotuned path is
    # tested in a fresh process by tests/attention/test_fused_buffers.py.
    os.environ.setdefault("BLOCKLAB_FUSED_AUTOTUNE", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """No test writes into the user's cache: subprocesses inherit this too."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BLOCKLAB_CACHE", str(tmp_path_factory.mktemp("blocklab-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """A small real code corpus: two standard-library packages (~0.5 MB)."""
    d = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for pkg in ("json", "email"):
        for f in (stdlib / pkg).glob("*.py"):
            shutil.copy(f, d / f"{pkg}_{f.name}")
    return d


@pytest.fixture
def overrides(corpus_dir):
    """A tiny run: seconds on one CPU core."""
    return {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {
            "steps": 20,
            "batch_size": 4,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "lr": 3e-3,
        },
    }


# Integration tests in files this list marks rather than the files themselves (their marks can move
# into them): whole files of CLI processes, single tests that train for seconds (the golden losses among
# them), every block's full-size step, the interpreted Triton kernel, and the scans of the whole tree (the
# test linter, the private-name check), which check the code base rather than a unit and run in `make test`
# beside ruff and lint-imports.
SLOW_ELSEWHERE = (
    "tests/cli/test_startup.py",
    "tests/cli/test_output_streams.py",
    "tests/cli/test_translate.py",
    "tests/cli/test_generate",
    "tests/cli/test_finetune",
    "tests/training/test_finetune.py::test_evaluation_runs_at_the_run_precision",
    "tests/training/test_finetune.py::test_finetuning_beats_the_majority_baseline_on_a_separable_task",
    "tests/training/test_trainer.py::test_bf16_autocast_and_tasks_train",
    "tests/training/test_grad_accum.py",
    "tests/training/test_sharded.py",
    "tests/blocks/test_blocks.py::test_every_block_trains_at_issue_shape",
    "tests/probes/test_trends.py",
    "tests/data/test_python_source.py::test_python_prepare_prints_and_stores_the_counts",
    "tests/test_lint_tests.py",
    "tests/test_private_names.py",
    "tests/test_golden.py",
    "tests/attention/test_impls.py::test_fused_and_materialized_agree",
    "tests/attention/test_fused.py::test_kernel_matches_float64_reference",
    "tests/blocks/test_depthmix.py::test_compiling_a_denseformer_block",
    # runs trained until the loss stalls (a few dozen steps, two or three runs a test); the detector itself is
    # checked on constructed loss curves in the same file, in test-fast
    "tests/training/test_stall.py::test_run_on_iid_words_stalls",
    "tests/training/test_stall.py::test_healthy_run_passes_through_the_unigram_entropy",
    "tests/training/test_stall.py::test_resuming_a_stalled_run",
    "tests/training/test_stall.py::test_a_run_that_stalled_at_its_last_step_resumes_stalled",
    # dynamo traces each block: seconds, most of them torch._dynamo's import and first trace
    "tests/blocks/test_mudd.py::test_compiling_a_block_leaves_its_dense_connections_eager",
    # transformers' import and a save/load per block: seconds per worker before the first assertion
    "tests/hf/test_models.py",
    # a whole `blocklab check` run (dynamo traces each competitor), and a compiled competitor
    "tests/bench/test_check_competitors.py::test_competitors_appear_in_the_table_with_their_correctness",
    "tests/bench/test_check_competitors.py::test_the_yardstick_is_plain_causal_sdpa",
    "tests/bench/test_check_competitors.py::test_backends_the_device_lacks",
    "tests/bench/test_check_competitors.py::test_the_pinned_backend_is_the_one_sdpa_runs",
    "tests/bench/test_check_competitors.py::test_a_broken_epilogue_makes_the_compiled_competitor_wrong",
    "tests/bench/test_check_competitors.py::test_an_injected_wrong_competitor_is_caught_timed_and_not_picked",
    "tests/bench/test_flops.py::test_the_fused_op_counts_what_the_sdpa_path_counts",  # the interpreted kernel
)
# Every block's "a short run that learns" (a few dozen optimizer steps each) is a training test too, and so is
# each encoder-decoder's "trains and translates" (40 to 60 steps until it has learnt the reversal task).
SLOW_NAMES = ("short_run_learns", "short_clm_run_learns", "trains_and_translates")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SLOW_ELSEWHERE) or any(n in item.name for n in SLOW_NAMES):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):  # an xdist worker, whose collection order the scheduler follows
        # Longest files first (tests/durations.py says why); `make test` turns xdist's own reorder off.
        order = longest_first([item.nodeid for item in items], load_durations())
        items[:] = [items[i] for i in order]
