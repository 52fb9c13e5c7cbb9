"""Personal data with a checkable shape: bank accounts (IBAN), network cards (MAC), phones'
device ids (IMEI) — Sentry Relay's ``@iban``, ``@mac`` and ``@imei``.

Each has a check that keeps false positives near zero: an IBAN's length is fixed per country
and its check digits pass ISO 7064 mod 97; an IMEI passes Luhn and is named as one; a MAC is
six pairs of hex digits (a time of day or an IPv6 address is not).
"""

from __future__ import annotations

import re
import string

from healer.core.publish.detectors import Hit, View, luhn, marker

# ISO 13616 lengths by country (the registry's current members).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}
IBAN_CENSUS = (r"[A-Z]{2}[0-9]{2} ?[A-Z0-9]{4} ?[A-Z0-9]{4}",)
_IBAN_START = re.compile(r"[A-Z]{2}[0-9]{2}")
_UPPER_DIGITS = frozenset(string.ascii_uppercase + string.digits)


def iban_valid(compact: str) -> bool:
    """ISO 7064 mod 97-10 over the rearranged IBAN (letters as 10 … 35)."""
    moved = compact[4:] + compact[:4]
    total = 0
    for c in moved:
        total = (total * (100 if c.isalpha() else 10) + int(c, 36)) % 97
    return total == 1


def iban_hits(v: View) -> list[Hit]:
    """IBANs, compact or printed in groups of four (``DE89 3704 0044 …``)."""
    text = v.text
    shape = v.shape
    if shape is not None:
        starts = _find_all(shape, b"AA00")
    else:
        starts = [m.start() for m in _IBAN_START.finditer(text)]
    out: list[Hit] = []
    last = 0
    n = len(text)
    for pos in starts:
        length = IBAN_LENGTHS.get(text[pos:pos + 2])
        if pos < last or length is None or (pos > 0 and text[pos - 1].isalnum()):
            continue
        chars = [text[pos:pos + 4]]
        got, j = 4, pos + 4
        while got < length and j < n:
            c = text[j]
            if c in _UPPER_DIGITS:
                chars.append(c)
                got += 1
                j += 1
            elif c == " " and j + 1 < n and text[j + 1] in _UPPER_DIGITS and (got - 4) % 4 == 0:
                j += 1  # printed form: a space between groups of four
            else:
                break
        if got != length or (j < n and text[j].isalnum()):
            continue
        if iban_valid("".join(chars)):
            out.append((pos, j, marker("IBAN")))
            last = j
    return out


def _find_all(hay: bytes, needle: bytes) -> list[int]:
    found = []
    i = hay.find(needle)
    while i != -1:
        found.append(i)
        i = hay.find(needle, i + 1)
    return found


_MAC = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}")
_HEXISH = frozenset(string.hexdigits + ":")
MAC_CENSUS = (r"[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}:",)


def mac_hits(v: View) -> list[Hit]:
    """``3c:22:fb:1a:7e:09``. All zeros and broadcast identify no device and stay."""
    text = v.text
    out: list[Hit] = []
    last = 0
    for i in v.positions(":"):
        s = i - 2
        if s < last or s < 0 or (s > 0 and text[s - 1] in _HEXISH):
            continue
        m = _MAC.match(text, s)
        if m is None or (m.end() < len(text) and text[m.end()] in _HEXISH):
            continue
        if m.group(0).lower() not in ("00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"):
            out.append((s, m.end(), marker("MAC")))
        last = m.end()
    return out


IMEI = re.compile(r"\bimei(?:sv)?\b[^0-9\n]{0,12}([0-9]{2}-?[0-9]{6}-?[0-9]{6}-?[0-9]{1,2})\b")


def imei_replace(m: re.Match[str]) -> str | None:
    digits = m.group(1).replace("-", "")
    if len(digits) == 15 and not luhn(digits):
        return None
    cut = m.start(1) - m.start()
    return m.group(0)[:cut] + marker("IMEI")
