"""The deterministic recognizers: what each finds, and the near-misses its validator drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.guardrails.recognizers import find, luhn, valid_iban, valid_ssn

EVAL = Path(__file__).resolve().parents[3] / "data" / "guardrails" / "eval.jsonl"


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, f.value) for f in find(text)]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("write to jane.doe+crm@example.co.uk today", "EMAIL", "jane.doe+crm@example.co.uk"),
        ("card 4111 1111 1111 1111 expires", "CARD", "4111 1111 1111 1111"),
        ("pay with 5500-0000-0000-0004", "CARD", "5500-0000-0000-0004"),
        ("amex 378282246310005.", "CARD", "378282246310005"),
        ("IBAN DE89 3704 0044 0532 0130 00 please", "IBAN", "DE89 3704 0044 0532 0130 00"),
        ("to GB82WEST12345698765432", "IBAN", "GB82WEST12345698765432"),
        ("SSN 123-45-6789 on file", "SSN", "123-45-6789"),
        ("call +44 20 7946 0958 now", "PHONE", "+44 20 7946 0958"),
        ("or (212) 555-0123", "PHONE", "(212) 555-0123"),
        ("host 192.168.10.20 is down", "IP", "192.168.10.20"),
        ("v6 2001:db8:85a3::8a2e:370:7334 up", "IP", "2001:db8:85a3::8a2e:370:7334"),
        ("key sk-proj-abcDEF1234567890abcdefXYZ", "SECRET", "sk-proj-abcDEF1234567890abcdefXYZ"),
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "SECRET", None),
        ("id AKIAIOSFODNN7EXAMPLE", "AWS_KEY", "AKIAIOSFODNN7EXAMPLE"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AWS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("Authorization: Bearer abc123def456ghi789jkl", "BEARER", "abc123def456ghi789jkl"),
    ],
)
def test_finds(text: str, kind: str, value: str | None) -> None:
    found = kinds(text)
    assert [k for k, _ in found] == [kind], found
    if value is not None:
        assert found[0][1] == value


def test_private_key_block_whole_and_begun() -> None:
    block = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc+/=\n-----END RSA PRIVATE KEY-----"
    )
    assert kinds(f"here:\n{block}\nthanks") == [("PRIVATE_KEY", block)]
    begun = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"
    assert kinds(begun) == [("PRIVATE_KEY", begun)]


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112 fails Luhn",
        "order 12345678901234 shipped",  # Luhn-valid or not, no issuer prefix
        "IBAN GB82WEST12345698765433 has a bad checksum",
        "IBAN DE89370400440532013001 is one digit long",
        "SSN 000-12-3456, 666-12-3456, 912-12-3456, 123-00-4567, 123-45-0000",
        "ip 10.0.0.256 and 01.02.03.04",
        "version 1.2.3, v2.10.4, release 3.11.7",
        "S3, EC2, EKS and RDS in us-east-1",
        "ISBN 978-3-16-148410-0 and 0-306-40615-2",
        "Tom had 1200 apples and gave 345 to each of 12 friends",
        "hex 0xdeadbeef, sha 3f786850e387550fdab836ed7e6dc881de23001b",
        "at 12:30:45 on 2024-12-06",
        "the word sk-learn and sk-short",
        "email me @ home, or user@localhost",
        "a::b and std::vector<int>",
    ],
)
def test_near_misses_are_not_flagged(text: str) -> None:
    assert kinds(text) == []


def test_validators() -> None:
    assert luhn("4111111111111111") and not luhn("4111111111111112")
    assert valid_iban("FR14 2004 1010 0505 0001 3M02 606")
    assert not valid_iban("FR14 2004 1010 0505 0001 3M02 607")
    assert not valid_iban("ZZ14 2004 1010 0505 0001 3M02 606")  # no such country
    assert valid_ssn("123-45-6789") and not valid_ssn("000-45-6789")
    assert not valid_ssn("078-05-1120")  # the Woolworth wallet card


def test_overlaps_resolve_to_one_value() -> None:
    # an e-mail whose local part is a phone-like run is one e-mail, not a phone too
    assert kinds("reach 2125550123@example.com") == [("EMAIL", "2125550123@example.com")]
    assert kinds("a@b.io and 4111-1111-1111-1111") == [
        ("EMAIL", "a@b.io"),
        ("CARD", "4111-1111-1111-1111"),
    ]


def test_the_labelled_set_is_read_whole_and_no_look_alike_is_flagged() -> None:
    """data/guardrails/eval.jsonl (bench/experiments/guardrails_quality.py): every value
    found with its type, nothing else found, no benign sentence flagged."""
    rows = [json.loads(line) for line in EVAL.read_text().splitlines() if line.strip()]
    assert len(rows) > 90
    for row in rows:
        want = {(v["type"], v["value"]) for v in row["values"]}
        assert set(kinds(row["text"])) == want, row["text"]
