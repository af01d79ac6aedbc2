#!/usr/bin/env bash
# The export's tests against the other major version of transformers (4.x; the dev extras install 5.x).
# Not part of make test: the two cannot be installed together. It puts transformers 4.57 and the
# huggingface_hub and tokenizers it requires in a folder ahead of the virtual environment's packages, and
# runs tests/hf on them (about a minute on 2 cores, after `make test` has built .venv).
#   bash tests/hf/transformers4.sh [VERSION]     # default 4.57.6
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${1:-4.57.6}"
TARGET="$(mktemp -d)"
trap 'rm -rf "$TARGET"' EXIT
.venv/bin/python -m pip install -q --target "$TARGET" --no-deps "transformers==$VERSION" "huggingface_hub<1.0" "tokenizers>=0.22,<=0.23.0"
PYTHONPATH="$TARGET" .venv/bin/python -c "import transformers; print('transformers', transformers.__version__)"
PYTHONPATH="$TARGET" .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 tests/hf/test_models.py tests/hf/test_export.py \
    tests/hf/test_configuration.py tests/hf/test_remote.py
