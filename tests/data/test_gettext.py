"""data.source = "gettext": the .mo reader and the cleaning, on catalogs these tests write themselves."""

import gettext
import struct

import pytest

from blocklab.data.gettext import MAX_CHARS, find_catalogs, gettext_pairs, read_mo
from blocklab.errors import UserError

HEADER = "Content-Type: text/plain; charset={charset}\nPlural-Forms: nplurals={n}; plural=(n != 1);\n"


def write_mo(path, messages, charset="UTF-8", nplurals=2, order="<"):
    """A GNU .mo file (the layout msgfmt writes, without the optional hash table).

    `messages`: (msgid, msgstr) with the .mo conventions: context as "ctx\\x04id", plural ids and
    forms joined by NUL."""
    entries = [("", HEADER.format(charset=charset, n=nplurals))] + list(messages)
    entries.sort(key=lambda e: e[0].encode(charset))
    ids = [k.encode(charset) for k, _ in entries]
    strs = [v.encode(charset) for _, v in entries]
    n = len(entries)
    o_ids, o_strs = 28, 28 + 8 * n
    data_start = o_strs + 8 * n
    table_ids, table_strs, blob = [], [], b""
    for s in ids:
        table_ids.append((len(s), data_start + len(blob)))
        blob += s + b"\0"
    for s in strs:
        table_strs.append((len(s), data_start + len(blob)))
        blob += s + b"\0"
    out = struct.pack(order + "7I", 0x950412DE, 0, n, o_ids, o_strs, 0, 0)
    out += b"".join(struct.pack(order + "2I", *t) for t in table_ids + table_strs) + blob
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out)
    return path


MESSAGES = [
    ("_Open", "Ö_ffnen"),  # GTK accelerator (mid-word in German)
    ("&Save file", "Datei &speichern"),  # Qt accelerator
    ("Cannot open %s: %s", "Kann %s nicht öffnen: %s"),  # printf formats: dropped
    ("Hello {name}", "Hallo {name}"),  # brace format: dropped
    ("%(count)d items", "%(count)d Einträge"),  # Python format: dropped
    ("Untranslated", ""),  # no translation: dropped
    ("GNOME", "GNOME"),  # an untranslated copy: dropped
    ("---", "---"),  # no letter: dropped
    ("menu\x04Quit", "Beenden"),  # context stripped
    ("A long\n  help text", "Ein langer\n  Hilfetext"),  # whitespace collapsed
    ("x" * (MAX_CHARS + 1), "y" * (MAX_CHARS + 1)),  # too long: dropped
    ("One file\x00Many files", "Eine Datei\x00Viele Dateien"),  # plural: both pairs
    ("file_name is required", "file_name ist nötig"),  # an identifier, not an accelerator
]


@pytest.fixture
def locale(tmp_path):
    root = tmp_path / "share" / "locale"
    write_mo(root / "de" / "LC_MESSAGES" / "app.mo", MESSAGES)
    # the same message in a second catalog (a duplicate pair) and a big-endian latin-1 file
    write_mo(
        root / "de" / "LC_MESSAGES" / "other.mo",
        [("Close", "Schließen"), ("_Open", "Ö_ffnen")],
        charset="ISO-8859-1",
        order=">",
    )
    write_mo(root / "fr" / "LC_MESSAGES" / "app.mo", [("Close", "Fermer")])
    return root


def test_reader_agrees_with_pythons_gettext(locale):
    path = locale / "de" / "LC_MESSAGES" / "app.mo"
    with open(path, "rb") as f:
        py = gettext.GNUTranslations(f)
    cat = read_mo(path)
    assert cat.nplurals == 2
    for e in cat.entries:
        key = e.msgid if e.context is None else f"{e.context}\x04{e.msgid}"
        if e.msgid_plural is None:
            assert py.gettext(key) == e.msgstrs[0] or e.msgstrs[0] == ""
        else:
            assert [py.ngettext(e.msgid, e.msgid_plural, n) for n in (1, 2)] == e.msgstrs
    quit_ = next(e for e in cat.entries if e.msgid == "Quit")
    assert quit_.context == "menu" and quit_.msgstrs == ["Beenden"]


def test_big_endian_and_latin1(locale):
    cat = read_mo(locale / "de" / "LC_MESSAGES" / "other.mo")
    assert {e.msgid: e.msgstrs[0] for e in cat.entries} == {"Close": "Schließen", "_Open": "Ö_ffnen"}


def test_cleaning_keeps_what_the_docstring_says(locale):
    got = gettext_pairs("de", "en", [locale])
    assert sorted(got.pairs) == sorted(
        [
            ("Datei speichern", "Save file"),
            ("Ein langer Hilfetext", "A long help text"),
            ("Eine Datei", "One file"),
            ("Viele Dateien", "Many files"),
            ("Beenden", "Quit"),
            ("Öffnen", "Open"),
            ("file_name ist nötig", "file_name is required"),
            ("Schließen", "Close"),
        ]
    )
    c = got.counts
    assert (c["format"], c["untranslated"], c["identical"], c["unusable"], c["duplicate"]) == (3, 1, 1, 2, 1)
    assert c["kept"] == 8 and c["catalogs"] == 2
    # the other direction: English source, German target
    assert ("Save file", "Datei speichern") in gettext_pairs("en", "de", [locale]).pairs


def test_plural_forms_beyond_two_keep_the_singular_only(tmp_path):
    root = tmp_path / "locale"
    write_mo(root / "pl" / "LC_MESSAGES" / "a.mo", [("One file\x00Many files", "Plik\x00Pliki\x00Plików")], nplurals=3)
    got = gettext_pairs("pl", "en", [root])
    assert got.pairs == [("Plik", "One file")] and got.counts["plural_dropped"] == 2


def test_catalogs_inside_python_packages_are_found(tmp_path):
    site = tmp_path / "site-packages"
    path = write_mo(site / "somepkg" / "locale" / "de" / "LC_MESSAGES" / "somepkg.mo", [("Yes", "Ja")])
    found, searched = find_catalogs("de", [site])
    assert found == [path.resolve()] and searched == [site]


def test_no_catalogs_is_one_line_naming_where_it_looked(tmp_path):
    with pytest.raises(UserError, match=r"no gettext catalogs for language 'xx'.*nowhere") as e:
        gettext_pairs("xx", "en", [tmp_path / "nowhere"])
    assert "\n" not in str(e.value)


def test_one_side_must_be_english(tmp_path):
    with pytest.raises(UserError, match="one of them must be 'en'"):
        gettext_pairs("de", "fr", [tmp_path])


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "too short"),
        (b"\x00" * 40, "bad magic"),
        (struct.pack("<7I", 0x950412DE, 0, 5, 28, 68, 0, 0), "damaged"),
    ],
)
def test_bad_catalogs(tmp_path, content, match):
    p = tmp_path / "bad.mo"
    p.write_bytes(content)
    with pytest.raises(UserError, match=match):
        read_mo(p)


def test_a_damaged_catalog_in_a_locale_tree_is_one_clear_line(tmp_path):
    root = tmp_path / "locale"
    bad = root / "de" / "LC_MESSAGES" / "broken.mo"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a catalog at all")
    with pytest.raises(UserError, match="broken.mo"):
        gettext_pairs("de", "en", [root])
