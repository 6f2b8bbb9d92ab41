"""The deterministic recognizers: a pattern finds a candidate, a validator keeps it.

Each recognizer is a compiled regular expression and a check of what it found (Luhn for
card numbers, ISO 13616 mod-97 for IBANs, the SSA's ranges for US SSNs, ``ipaddress``
for IPs), so near-misses (an order id that fails Luhn, ``000-12-3456``) are not flagged.
They run in process, in well under a millisecond on a short prompt
(``bench/perf/guardrails_latency.py``). ``find`` returns the spans of every kept
value, overlaps resolved toward the earlier, then the longer, then the higher-ranked
one. A value names its type (``EMAIL``, ``CARD``...): that type is the placeholder's
and the policy's word for it (``policies/guardrails_spec.py``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

Validator = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # EMAIL, PHONE, CARD, IBAN, SSN, IP, SECRET, AWS_KEY, BEARER, PRIVATE_KEY, DENY
    start: int
    end: int
    value: str


@dataclass(frozen=True, slots=True)
class Recognizer:
    kind: str
    pattern: re.Pattern[str]
    valid: Validator | None = None
    group: int = 0  # the group that is the value (a bearer token without "Bearer ")
    # a cheap test that lets a text without it skip the regex (``@`` for e-mail)
    needs: str | None = None

    def scan(self, text: str) -> Iterable[Finding]:
        if self.needs is not None and self.needs not in text:
            return
        for match in self.pattern.finditer(text):
            value = match.group(self.group)
            if self.valid is None or self.valid(value):
                yield Finding(self.kind, match.start(self.group), match.end(self.group), value)


def luhn(digits: str) -> bool:
    total, double = 0, False
    for char in reversed(digits):
        d = ord(char) - 48
        if double:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        double = not double
    return total % 10 == 0


# The issuers' prefixes (Visa, Mastercard 51-55 and 2221-2720, Amex, Discover, JCB,
# Diners, UnionPay, Maestro): a Luhn-valid number outside them is more likely an id.
_CARD_PREFIX = re.compile(
    r"^(?:4|5[1-5]|2[2-7]|3[47]|6(?:011|5|4[4-9]|2)|35|3(?:0[0-5]|[68])|5[06-8])"
)


def valid_card(value: str) -> bool:
    digits = value.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or _CARD_PREFIX.match(digits) is None:
        return False
    if len(set(digits)) < 2:  # one digit repeated: a mask, not a number
        return False
    return luhn(digits)


# ISO 13616 lengths per country (the registry's; a country not here is refused).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def valid_iban(value: str) -> bool:
    iban = value.replace(" ", "").upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    moved = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def valid_ssn(value: str) -> bool:
    area, group, serial = value[0:3], value[4:6], value[7:11]
    if area in ("000", "666") or area[0] == "9":
        return False
    return group != "00" and serial != "0000" and value not in ("078-05-1120", "219-09-9999")


def valid_phone(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    if not 10 <= digits <= 15:
        return False
    plain = "".join(c for c in value if c.isdigit())
    return len(set(plain)) > 2


def valid_ipv4(value: str) -> bool:
    parts = value.split(".")
    if any(len(p) > 1 and p[0] == "0" for p in parts):  # 01.02.03.04: a version, a date
        return False
    return all(int(p) <= 255 for p in parts) and value != "0.0.0.0"


def valid_ipv6(value: str) -> bool:
    if value.count(":") < 2 or sum(c.isalnum() for c in value) < 3:
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def valid_secret(value: str) -> bool:
    body = value.split("-", 1)[-1] if "-" in value else value.split("_", 1)[-1]
    return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)


def valid_email(value: str) -> bool:
    local = value.split("@", 1)[0]
    return not (local.startswith(".") or local.endswith(".") or ".." in value)


def _aws_secret(value: str) -> bool:
    """A 40-character secret access key: mixed case and digits (a hash in hex is not)."""
    return (
        len(value) == 40
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )


_B = r"(?<![\w.+-])"  # a value starts where no word character, dot or sign touches it
RECOGNIZERS: tuple[Recognizer, ...] = (
    Recognizer(
        "PRIVATE_KEY",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----"
            r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----|[A-Za-z0-9+/=\s:,-]*)"
        ),
        needs="PRIVATE KEY",
    ),
    Recognizer(
        "SECRET",
        re.compile(
            r"(?<![\w-])(?:(?:sk|pk|rk)-(?:[A-Za-z]{2,8}-){0,2}[A-Za-z0-9_-]{20,}"
            r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9-]{10,}"
            r"|AIza[0-9A-Za-z_-]{35}"
            r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
        ),
        valid_secret,
    ),
    Recognizer(
        "AWS_KEY",
        re.compile(
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
            r"(?![A-Za-z0-9])"
        ),
    ),
    Recognizer(
        "AWS_KEY",
        re.compile(
            r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})(?![\w/+])"
        ),
        _aws_secret,
        group=1,
    ),
    Recognizer(
        "BEARER",
        re.compile(r"\b[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)"),
        lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v),
        group=1,
        needs="earer",
    ),
    Recognizer(
        "EMAIL",
        re.compile(
            _B + r"[A-Za-z0-9][A-Za-z0-9._%+'-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
            r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}"
            r"(?![A-Za-z0-9-])"
        ),
        valid_email,
        needs="@",
    ),
    Recognizer(
        "IBAN",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"),
        valid_iban,
    ),
    Recognizer("CARD", re.compile(r"(?<![\w.-])\d(?:[ -]?\d){12,18}(?!\w|[.,-]\d)"), valid_card),
    Recognizer("SSN", re.compile(r"(?<![\w.-])\d{3}-\d{2}-\d{4}(?![\w-]|\.\d)"), valid_ssn),
    Recognizer(
        "PHONE",
        re.compile(
            r"(?:(?<![\w+])\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}"
            r"|(?<![\w.+-])\(?[2-9]\d{2}\)?[ .-]\d{3}[ .-]\d{4})(?![\w.-]?\d)"
        ),
        valid_phone,
    ),
    Recognizer("IP", re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]?\d)"), valid_ipv4),
    Recognizer(
        "IP",
        re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:.])"),
        valid_ipv6,
        needs=":",
    ),
)
KINDS = tuple(dict.fromkeys(r.kind for r in RECOGNIZERS))
_RANK = {kind: i for i, kind in enumerate(KINDS)}


def find(text: str, kinds: frozenset[str] | None = None) -> list[Finding]:
    """Every value of the ``kinds`` asked for (None: all) in ``text``, without overlaps."""
    found: list[Finding] = []
    for recognizer in RECOGNIZERS:
        if kinds is None or recognizer.kind in kinds:
            found.extend(recognizer.scan(text))
    return resolve(found)


def resolve(found: list[Finding]) -> list[Finding]:
    """Sorted by start; of two that overlap the earlier wins, then the longer, then the
    one ranked first in ``RECOGNIZERS``."""
    if len(found) < 2:
        return found
    found.sort(key=lambda f: (f.start, -(f.end - f.start), _RANK.get(f.kind, 99)))
    kept: list[Finding] = []
    end = -1
    for finding in found:
        if finding.start >= end:
            kept.append(finding)
            end = finding.end
    return kept
