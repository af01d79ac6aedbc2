"""`data.source = "gettext"`: parallel text from the system's compiled message catalogs (.mo files).

Every program translated with GNU gettext ships, per language, a catalog that maps each English
message (`msgid`) to its human translation (`msgstr`). On Debian and Ubuntu they live in
`<prefix>/share/locale/<lang>/LC_MESSAGES/*.mo`; Python packages ship their own under
`<package>/locale/<lang>/LC_MESSAGES/`. `gettext:DIR[:DIR...]` reads locale folders of your own.

Cleaning (what a pair must be to be kept; the counts are logged and stored in the corpus stats):
- the header entry (empty msgid) and untranslated messages (empty msgstr) are dropped;
- message contexts (`msgctxt`) are stripped; plural forms: the singular pair (msgid, msgstr[0]) is
  kept, and the plural pair (msgid_plural, msgstr[1]) too when the catalog has two plural forms
  (German, English, most European languages); other plural forms are dropped;
- keyboard accelerators are removed: one `_` (GTK) or `&` (Qt/KDE) before a letter or digit, when it
  is the only such marker in the message and its word does not occur verbatim in the other language's
  text (`_Open` -> `Open`, `Ö_ffnen` -> `Öffnen`, but `file_name` in both sides is an identifier);
- messages with format directives (`%s`, `%-10.3lf`, `%1$s`, `%(name)s`, `{0}`, `{name}`) are
  dropped: a directive stands for text the catalog does not hold, and cutting it out leaves broken
  sentences that no reference translation matches;
- whitespace runs (newlines of long help texts included) become one space; pairs where a side has
  no letter, where both sides are identical (an untranslated copy), or where a side exceeds
  MAX_CHARS characters (option tables, licence texts) are dropped;
- exact duplicate pairs (the same message in several catalogs) are kept once.
"""

from __future__ import annotations

import re
import struct
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.errors import UserError

MO_MAGIC = 0x950412DE
MAX_CHARS = 300
# printf (%s, %-10.3lf, %1$s, %'d, %zu, %m), Python %(name)s, brace formats ({0}, {name}, {}).
_FORMAT = re.compile(
    r"%(?:\(\w+\))?(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64)?"
    r"[diouxXeEfFgGaAcspnmCS%]|\{\w*(?:[:!][^{}]*)?\}"
)
_ACCEL = re.compile(r"[_&](?=[^\W_])")
_LETTER = re.compile(r"[^\W\d_]")
_SPACE = re.compile(r"\s+")


@dataclass
class MoEntry:
    msgid: str
    msgstrs: list[str]
    msgid_plural: str | None = None
    context: str | None = None


@dataclass
class Catalog:
    path: Path
    entries: list[MoEntry]
    nplurals: int | None = None


def read_mo(path: str | Path) -> Catalog:
    """Parse a compiled GNU gettext catalog (both byte orders); a damaged file is a UserError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read message catalog {path}: {e.strerror}") from None
    if len(data) < 20:
        raise UserError(f"{path} is not a gettext .mo catalog (too short)")
    for order in ("<", ">"):
        if struct.unpack(order + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise UserError(f"{path} is not a gettext .mo catalog (bad magic number)")
    _, n, o_ids, o_strs = struct.unpack(order + "4I", data[4:20])
    raw = []
    try:
        for i in range(n):
            li, oi = struct.unpack_from(order + "2I", data, o_ids + 8 * i)
            ls, os_ = struct.unpack_from(order + "2I", data, o_strs + 8 * i)
            if oi + li > len(data) or os_ + ls > len(data):
                raise struct.error("string outside the file")
            raw.append((data[oi : oi + li], data[os_ : os_ + ls]))
    except struct.error:
        raise UserError(f"{path} is a damaged gettext .mo catalog (its string table runs past the end)") from None
    charset, nplurals = "utf-8", None
    for msgid, msgstr in raw:
        if msgid == b"":  # the header: "Content-Type: text/plain; charset=UTF-8", "Plural-Forms: nplurals=2; ..."
            header = msgstr.decode("ascii", "replace")
            m = re.search(r"charset=([\w.-]+)", header)
            if m and m.group(1).upper() != "CHARSET":
                charset = m.group(1)
            m = re.search(r"nplurals\s*=\s*(\d+)", header)
            nplurals = int(m.group(1)) if m else None
    entries = []
    for msgid, msgstr in raw:
        if msgid == b"":
            continue
        try:
            key, value = msgid.decode(charset), msgstr.decode(charset)
        except (UnicodeDecodeError, LookupError):
            continue  # a message in another encoding than the header says: unusable, not fatal
        context, _, key = key.rpartition("\x04")
        singular, _, plural = key.partition("\x00")
        entries.append(MoEntry(singular, value.split("\x00"), plural or None, context or None))
    return Catalog(path, entries, nplurals)


def locale_roots() -> list[Path]:
    """Where catalogs are looked for: the system's and the interpreter's share/locale, and installed packages."""
    prefixes = dict.fromkeys(Path(p) for p in ("/usr", "/usr/local", sys.prefix, sys.base_prefix))
    roots = [p / "share" / "locale" for p in prefixes]
    for key in ("purelib", "platlib"):
        roots.append(Path(sysconfig.get_paths()[key]))
    return list(dict.fromkeys(roots))


def find_catalogs(lang: str, roots: Iterable[Path] | None = None) -> tuple[list[Path], list[Path]]:
    """(the .mo files for `lang`, the folders searched), in a stable order. A locale root holds
    <lang>/LC_MESSAGES directly; a package tree holds them at any depth below a `locale` folder."""
    searched, found = [], []
    for root in locale_roots() if roots is None else list(roots):
        root = Path(root)
        searched.append(root)
        if not root.is_dir():
            continue
        direct = root / lang / "LC_MESSAGES"
        if direct.is_dir():
            found += sorted(direct.glob("*.mo"))
        else:  # a package tree: .../locale/<lang>/LC_MESSAGES/*.mo
            found += sorted(root.glob(f"**/locale/{lang}/LC_MESSAGES/*.mo"))
    return list(dict.fromkeys(p.resolve() for p in found)), searched


def _strip_accelerator(text: str, other: str) -> str:
    marks = list(_ACCEL.finditer(text))
    if len(marks) != 1:
        return text
    i = marks[0].start()
    word = re.search(r"\S*$", text[:i]).group() + re.match(r"\S*", text[i:]).group()
    return text if word in other else text[:i] + text[i + 1 :]


def _tidy(text: str) -> str | None:
    text = _SPACE.sub(" ", text).strip()
    return text if _LETTER.search(text) and len(text) <= MAX_CHARS else None


def clean_pair(english: str, other: str) -> tuple[str, str] | None:
    """The message pair as sentences, or None when it is to be dropped (see the module docstring)."""
    if _FORMAT.search(english) or _FORMAT.search(other):
        return None
    en, xx = _tidy(_strip_accelerator(english, other)), _tidy(_strip_accelerator(other, english))
    return None if en is None or xx is None else (en, xx)


@dataclass
class GettextPairs:
    pairs: list[tuple[str, str]]  # (source, target), unique, in catalog order
    catalogs: list[Path]
    counts: dict = field(default_factory=dict)  # what was dropped, and why


def gettext_pairs(src_lang: str, tgt_lang: str, roots: Iterable[Path] | None = None) -> GettextPairs:
    """Cleaned, deduplicated (source, target) pairs; one language must be English (the msgids)."""
    if "en" not in (src_lang, tgt_lang) or src_lang == tgt_lang:
        raise UserError(
            f"data.source='gettext' pairs English message ids with one other language; got "
            f"data.src_lang={src_lang!r}, data.tgt_lang={tgt_lang!r} (one of them must be 'en')"
        )
    lang = tgt_lang if src_lang == "en" else src_lang
    catalogs, searched = find_catalogs(lang, roots)
    if not catalogs:
        raise UserError(
            f"no gettext catalogs for language {lang!r}: looked for {lang}/LC_MESSAGES/*.mo in "
            + ", ".join(map(str, searched))
        )
    counts = dict.fromkeys(
        ("messages", "untranslated", "plural_dropped", "format", "unusable", "identical", "duplicate", "kept"), 0
    )
    seen, pairs = set(), []
    for path in catalogs:
        cat = read_mo(path)
        for e in cat.entries:
            candidates = [(e.msgid, e.msgstrs[0])]
            if e.msgid_plural is not None:
                if cat.nplurals == 2 and len(e.msgstrs) == 2:
                    candidates.append((e.msgid_plural, e.msgstrs[1]))
                else:
                    counts["plural_dropped"] += max(len(e.msgstrs) - 1, 1)
            for english, other in candidates:
                counts["messages"] += 1
                if not other:
                    counts["untranslated"] += 1
                    continue
                if _FORMAT.search(english) or _FORMAT.search(other):
                    counts["format"] += 1
                    continue
                cleaned = clean_pair(english, other)
                if cleaned is None:
                    counts["unusable"] += 1
                    continue
                en, xx = cleaned
                if en == xx:
                    counts["identical"] += 1
                    continue
                pair = (en, xx) if src_lang == "en" else (xx, en)
                if pair in seen:
                    counts["duplicate"] += 1
                    continue
                seen.add(pair)
                pairs.append(pair)
    counts["kept"] = len(pairs)
    counts["catalogs"] = len(catalogs)
    return GettextPairs(pairs, catalogs, counts)
