"""The built-in sweeps: one TOML file each beside this module, in the format a user writes (docs/sweeps.md), so that
`blocklab compare --preset NAME --dump > my.toml` gives a starting point to copy and edit.

A preset at another scale (a GPU twin) is an overlay: `extends = "NAME"` starts from that preset; the overlay's
tables merge into it key by key, any other value (a number, a string, a list, `[[runs]]`) replaces the base's,
and the dotted table paths listed in `replace` (e.g. "experiments") replace the base's tables whole.
"""

from __future__ import annotations

from importlib import resources

import tomllib

from blocklab.errors import UserError

OVERLAY_KEYS = ("extends", "replace")


def merge(base: dict, over: dict, replace: tuple[str, ...] = (), path: str = "") -> dict:
    """`over` laid on `base`: tables merged key by key, other values and the tables at `replace`'s paths replaced."""
    out = dict(base)
    for key, value in over.items():
        at = f"{path}.{key}" if path else key
        if at in replace or not (isinstance(value, dict) and isinstance(out.get(key), dict)):
            out[key] = value
        else:
            out[key] = merge(out[key], value, replace, at)
    return out


def resolve(name: str, files: dict[str, dict], seen: tuple[str, ...] = ()) -> dict:
    """The spec of preset `name`, its overlays applied."""
    if name in seen:
        raise UserError(f"preset {name!r} extends itself through {' -> '.join(seen)}")
    spec = dict(files[name])
    parent = spec.pop("extends", None)
    replace = tuple(spec.pop("replace", ()))
    if parent is None:
        return spec
    if parent not in files:
        raise UserError(f"preset {name!r} extends {parent!r}, which is no preset")
    return merge(resolve(parent, files, seen + (name,)), spec, replace)


def _load() -> dict[str, dict]:
    here = resources.files(__name__)
    files = {}
    for entry in sorted(here.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            files[entry.name[: -len(".toml")]] = tomllib.loads(entry.read_text())
    specs = {name: resolve(name, files) for name in files}
    return {spec.get("name", name): spec for name, spec in specs.items()}


def preset_text(name: str) -> str:
    """The preset's own file, as shipped (an overlay shows its `extends`)."""
    return resources.files(__name__).joinpath(f"{name}.toml").read_text()


# The presets in the order `compare --help` lists them: the demo first, then by what they answer.
ORDER = (
    "quick",
    "xiong-warmup",
    "he-codeparrot",
    "depth",
    "zoo",
    "zoo-gpu",
    "warmup",
    "warmup-gpu",
    "xiong-iwslt",
    "xiong-iwslt-gpu",
    "he-bert",
    "he-bert-gpu",
    "xiong-bert",
    "scaling",
    "scaling-gpu",
    "stream",
    "stream-depth",
    "stream-depth-gpu",
    "stream-gpu",
    "warmup-answers",
    "warmup-answers-gpu",
    "optimizers",
    "optimizers-gpu",
)
_ALL = _load()
PRESETS: dict[str, dict] = {n: _ALL[n] for n in ORDER if n in _ALL} | {n: s for n, s in _ALL.items() if n not in ORDER}
