"""What is redacted before anything is stored: one rule for every write, at every entry point.

A payment card number (Luhn-valid, in a card network's issuer range and length, or named a
card), an IBAN (its country's length, mod 97), an identity number with a check (the Chinese
resident identity number by its structure: a province's code, a birth date, the check
character; a US SSN's structure) and a secret (a provider's API key or token, a private key, a
password, a random value assigned to a secret's or an environment variable's name) are
replaced by a typed placeholder (``[card]``, ``[iban]``, ``[national-id]``, ``[secret]``) in a
fact's text, key, tags and source, and in a session message's content, tool calls, name and
metadata, before the fact is stamped (so its id and hash are of what is stored) or the message
is appended (so the state, the session log and the evicted tool results never hold the value).
A regular expression finds the candidate spans; ``python-stdnum`` computes the checks
(``luhn``, ``iban``, ``cn.ric``'s check character and date, ``us.ssn``) and
``detect-secrets``' plugins find the providers' secrets, so no checksum is written here. What a
number is named decides where its digits cannot: an order number that passes Luhn stays. Measured
on two corpora, one generated here and one whose values Faker makes
(``benchmarks/privacy/redaction.py``, RESULTS.md "Privacy: redaction").

``Redactor.mode`` (``MEMORY_PRIVACY__REDACTION``): ``redact`` (the default) replaces and counts;
``refuse`` raises ``SensitiveDataError`` (``sensitive_data``, a 422) naming the field and the
kind, never the value, before anything is written; ``off`` stores what was sent.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date
from itertools import chain
from typing import Any, Literal

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from stdnum import iban, luhn
from stdnum.cn import ric
from stdnum.us import ssn

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact, Source
from memory_service.domain.messages import Msg, ToolCall

Kind = Literal["card", "iban", "national-id", "secret"]
KINDS: tuple[Kind, ...] = ("card", "iban", "national-id", "secret")
PLACEHOLDERS: dict[str, str] = {kind: f"[{kind}]" for kind in KINDS}
DESCRIBED = {
    "card": "a payment card number",
    "iban": "an IBAN",
    "national-id": "an identity number",
    "secret": "a secret (a key, token, private key or password)",
}
Mode = Literal["redact", "refuse", "off"]
MODES: tuple[str, ...] = ("redact", "refuse", "off")
PRIORITY = {"national-id": 0, "card": 1, "iban": 2, "secret": 3}  # on the same span

# -- numbers: a candidate span here, the check in python-stdnum --------------------------------

# Digits in groups joined by one space or dash, not glued to a letter, a digit, a "+" (a
# phone's country code), a decimal point, or by a dash to more of an identifier (a UUID's
# middle groups; ``card-4111…`` is a card). ASCII classes: a CJK character next to the digits
# (``卡号6222…``) is a boundary, where ``\w`` would not be.
_DIGIT_RUN = re.compile(
    r"(?<![0-9A-Za-z_+])(?<![0-9][.,])(?<![0-9]-)[0-9]+(?:[ \-][0-9]+)*"
    r"(?![0-9A-Za-z_])(?!-[0-9A-Za-z])"
)
_SEPARATOR = re.compile(r"[ \-]")
# A resident identity number: 6-8-4 digits (as it is printed, with a space or a dash), ending
# in a digit or X
_RIC = re.compile(
    r"(?<![0-9A-Za-z_])[1-9][0-9]{5}[ \-]?(?:18|19|20)[0-9]{6}[ \-]?[0-9]{3}[0-9Xx]"
    r"(?![0-9A-Za-z_])"
)
# The first two digits of a region code: the provinces, regions and municipalities, Taiwan (71),
# Hong Kong, Macau and their residents' permits (81-83). A number keeps the six-digit code of
# the county and year it was issued in; counties are merged, renamed and renumbered, so a list
# of today's codes rejects real numbers. The province, the date and the check decide.
_PROVINCES = frozenset(
    str(code)
    for code in (*range(11, 16), *range(21, 24), *range(31, 38), *range(41, 47), *range(50, 55))
    + (*range(61, 66), 71, 81, 82, 83)
)
# ASCII boundaries: "SSN是…" names the number as "SSN: …" does
_SSN_WORD = (
    r"(?i:(?<![A-Za-z])ssn(?![A-Za-z])|social security(?: number| no\.?)?"
    r"|社会安全号码?|社會安全號碼?)"
)
# Nine digits with no dashes are an SSN only next to its name, before or after it
_SSN_CUE = re.compile(
    rf"{_SSN_WORD}[^0-9]{{0,12}}(?<![0-9])([0-9]{{9}})(?![0-9])"
    rf"|(?<![0-9A-Za-z_])([0-9]{{9}})(?![0-9])[^0-9]{{0,12}}{_SSN_WORD}"
)
# The card networks' issuer ranges (ISO/IEC 7812 IINs, first digits, inclusive) and the lengths
# each issues. A Luhn-valid number outside them is not taken for a card unless it is named one.
_NETWORKS: tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...] = (
    ("UATP", ("1",), (15,)),
    ("JCB, 15 digits", ("1800", "2131"), (15,)),
    ("Mir", ("2200-2204",), (16, 17, 18, 19)),
    ("Mastercard", ("2221-2720", "51-55"), (16,)),
    ("Diners Club", ("300-305", "3095", "36", "38-39"), (14, 15, 16, 17, 18, 19)),
    ("China T-Union", ("31",), (19,)),
    ("American Express", ("34", "37"), (15,)),
    ("JCB and its co-branded cards", ("35",), (16, 17, 18, 19)),
    ("Visa", ("4",), (13, 16, 19)),
    ("Maestro", ("50", "56-69"), (12, 13, 14, 15, 16, 17, 18, 19)),
    ("Discover, UnionPay", ("6011", "62", "644-649", "65"), (16, 17, 18, 19)),
    ("RuPay", ("60", "65", "81", "82", "508", "353", "356"), (16,)),
    ("UzCard", ("8600",), (16,)),
    # ISO/IEC 7812 leaves 9 to national bodies: Prostir, Troy, Humo, Napas and others
    ("national schemes", ("9",), (16, 19)),
)
# What a number is named: a card, or something else that is numbered (an order, a parcel, an
# invoice, a phone, a product). The nearest name before the digits decides: a Luhn-valid
# number named an order number is one, whatever its first digits; one named a card is a card,
# whatever network issued it.
_CARD_NAME = (
    r"(?i:\b(?:credit |debit |bank |payment )?cards?\b|\bcc\b|\bpan\b|\bvisa\b|\bmastercard\b"
    r"|\bamex\b|\bmaestro\b|\bjcb\b|\bdiners\b|\bunionpay\b|\brupay\b"
    r"|karte|\bcarte\b|\btarjeta\b|\bcart[ãa]o\b|\bcarta\b|\bkaart\b|\bkarta\b|карт"
    r"|卡|カード|카드)"
)
_OTHER_NAME = (
    r"(?i:\border(?:s|ed)?\b|\binvoice\b|\breceipt\b|\btracking\b|\bshipment\b|\bparcel\b"
    r"|\bconsignment\b|\bwaybill\b|\breference\b|\bref\b|\bbooking\b|\breservation\b"
    r"|\bconfirmation\b|\bticket\b|\btransaction\b|\btxn\b|\bserial\b|\bimei\b|\bisbn\b"
    r"|\bean\b|\bupc\b|\bgtin\b|\bsku\b|\bbarcode\b|\bcustomer\b|\bmember(?:ship)?\b"
    r"|\bphone\b|\btel\b|\bmobile\b|\bfax\b|\bsim(?:[ -]?card)?\b|\biccid\b"
    r"|bestell|auftrag|rechnung|sendung|buchung|referenz|kundennummer|seriennummer|telefon"
    r"|\bcommande\b|\bfacture\b|\bsuivi\b|\bcolis\b|\bréservation\b|\bréférence\b|\btéléphone\b"
    r"|\bpedido\b|\bfactura\b|\bseguimiento\b|\benv[ií]o\b|\breserva\b|\breferencia\b"
    r"|\bteléfono\b|\bordine\b|\bfattura\b|\bspedizione\b|\bencomenda\b|\brastreio\b"
    r"|\bfatura\b|\bbestelling\b|\bfactuur\b|\bzending\b|заказ|сч[её]т|накладн|трек|телефон"
    r"|订单|訂單|单号|單號|运单|運單|快递|快遞|物流|发票|發票|流水号|交易号|序列号|条码|电话|電話|手机"
    r"|注文|伝票|追跡|予約|請求書|領収書|주문|송장|배송|영수증|전화)"
)
_NAMES = re.compile(f"(?P<card>{_CARD_NAME})|(?P<other>{_OTHER_NAME})")
NAME_REACH = 40  # characters before the digits searched for what they are named
_CLAUSE_END = re.compile(r"[0-9\n!?;。！？；]")
_FULL_STOP = re.compile(r"(?P<word>\w*)\.(?=\s|[^\x00-\x7f]|$)")
ABBREVIATION_CHARS = 3  # "No.", "Nr.", "Ref.", "Tel." end a word, not a sentence
_IBAN = re.compile(r"(?<![0-9A-Za-z_])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}")


def _network(digits: str) -> str | None:
    """The card network whose issuer range and lengths hold ``digits``, if any."""
    for name, ranges, lengths in _NETWORKS:
        if len(digits) not in lengths:
            continue
        for span in ranges:
            low, _, high = span.partition("-")
            if low <= digits[: len(low)] <= (high or low):
                return name
    return None


def _named(text: str, start: int) -> str | None:
    """What the words just before ``text[start:]`` name it ("card", "other" or None): the
    nearest name in the same clause, with no other number between it and the digits."""
    before = text[max(0, start - NAME_REACH) : start]
    cuts = list(_CLAUSE_END.finditer(before))
    if cuts:
        before = before[cuts[-1].end() :]
    for stop in reversed(list(_FULL_STOP.finditer(before))):
        if len(stop.group("word")) > ABBREVIATION_CHARS:  # "No. 4111…" is not a new sentence
            before = before[stop.end() :]
            break
    names = list(_NAMES.finditer(before))
    return names[-1].lastgroup if names else None


def _is_card(digits: str, named: str | None = None) -> bool:
    """A Luhn-valid number of 12-19 digits in a network's range and length, or named a card;
    never one named as something else (an order number that happens to pass Luhn)."""
    if named == "other" or not 12 <= len(digits) <= 19 or not luhn.is_valid(digits):
        return False
    if len(digits) == 18 and _born(digits):
        return False
    return named == "card" or _network(digits) is not None


def _born(digits: str) -> bool:
    """Whether 18 digits carry a resident identity number's birth date: one with a wrong
    check digit is a mistyped identity number, not a card that happens to pass Luhn."""
    try:
        ric.get_birth_date(digits)
    except ValueError:
        return False
    return True


def _is_ric(number: str) -> bool:
    """A resident identity number by its structure: a province's code first, a birth date
    that has happened, and the check character (ISO 7064 mod 11-2)."""
    if number[:2] not in _PROVINCES:
        return False
    try:
        born = ric.get_birth_date(number)
    except ValueError:
        return False
    return born <= date.today() and ric.calc_check_digit(number) == number[-1]


@dataclass(frozen=True, slots=True)
class Finding:
    """One sensitive value: its kind and where it is (``text[start:end]``)."""

    kind: Kind
    start: int
    end: int


def _card_window(text: str, window: list[tuple[int, int]], named: str | None) -> bool:
    """Whether these digit groups of ``text`` are printed as a card is: 3-6 digits a group
    (the last may be shorter: 4-4-4-1 for 13 digits), one separator, and a valid number."""
    if any(not 3 <= e - s <= 6 for s, e in window[:-1]) or window[-1][1] - window[-1][0] > 6:
        return False
    if len({text[e] for (_, e) in window[:-1]}) > 1:
        return False
    return _is_card("".join(text[s:e] for s, e in window), named)


def _numbers_in_run(match: re.Match[str], found: list[Finding]) -> None:
    """The cards and SSNs of one run of digit groups. A run of 12-19 digits is one number or
    none (a card does not hide inside a longer one); a longer run's windows of groups are
    tried, the longest first (a card followed by a year)."""
    text, base = match.group(), match.start()
    named = _named(match.string, base)
    groups = [(g.start(), g.end()) for g in re.finditer(r"[0-9]+", text)]
    sizes = [end - start for start, end in groups]
    digits = sum(sizes)
    if sizes == [3, 2, 4] and text[3] == text[6] and ssn.is_valid(text[:3] + text[4:6] + text[7:]):
        found.append(Finding("national-id", base, base + len(text)))
    elif len(groups) == 1 or digits <= 19:
        one = _is_card(text, named) if len(groups) == 1 else _card_window(text, groups, named)
        if one:
            found.append(Finding("card", base, base + len(text)))
    else:
        i = 0
        while i < len(groups):
            for j in range(len(groups), i, -1):
                window = groups[i:j]
                if 12 <= sum(e - s for s, e in window) <= 19 and _card_window(text, window, named):
                    found.append(Finding("card", base + window[0][0], base + window[-1][1]))
                    i = j - 1
                    break
            i += 1


def _iban_at(match: re.Match[str]) -> Finding | None:
    """The longest prefix of the candidate that is a valid IBAN (the regex also takes the
    capitals and digits that follow one, such as a BIC)."""
    text = match.group()
    for end in range(len(text), 14, -1):
        if text[end - 1] != " " and iban.is_valid(text[:end]):
            return Finding("iban", match.start(), match.start() + end)
    return None


def find_numbers(text: str) -> list[Finding]:
    found: list[Finding] = []
    for m in _RIC.finditer(text):
        if _is_ric(_SEPARATOR.sub("", m.group()).upper()):
            found.append(Finding("national-id", m.start(), m.end()))
    for m in _SSN_CUE.finditer(text):
        group = 1 if m.group(1) else 2
        if ssn.is_valid(m.group(group)):
            found.append(Finding("national-id", *m.span(group)))
    for m in _DIGIT_RUN.finditer(text):
        if sum(c.isdigit() for c in m.group()) >= 9:
            _numbers_in_run(m, found)
    for m in _IBAN.finditer(text):
        hit = _iban_at(m)
        if hit is not None:
            found.append(hit)
    return found


# -- secrets: detect-secrets' plugins -----------------------------------------------------


class _MoreProviders(RegexBasedDetector):
    """Providers detect-secrets 1.5 has no plugin for, in its plugin's shape."""

    secret_type = "API key"  # noqa: S105 - a label
    denylist = (
        re.compile(r"AIza[0-9A-Za-z_\-]{35}"),  # Google
        re.compile(r"sk-ant-[A-Za-z0-9_\-]{32,}"),  # Anthropic
        re.compile(r"hf_[A-Za-z0-9]{34}"),  # Hugging Face
    )


# The provider plugins; the high-entropy ones are left out (a git hash or a UUID is one)
_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    ArtifactoryDetector,
    AWSKeyDetector,
    AzureStorageKeyDetector,
    BasicAuthDetector,
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    JwtTokenDetector,
    MailchimpDetector,
    NpmDetector,
    OpenAIDetector,
    PrivateKeyDetector,
    PypiTokenDetector,
    SendGridDetector,
    SlackDetector,
    SquareOAuthDetector,
    StripeDetector,
    TelegramBotTokenDetector,
    TwilioKeyDetector,
    _MoreProviders,
)
_PATTERNS = tuple((plugin, p) for plugin in _PLUGINS for p in plugin.denylist)
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-+/=]*(?:\.[A-Za-z0-9_\-+/=]+)*")
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|PRIVATE KEY BLOCK-----")
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=\s:-]*")
_TRIM = " \t\r\n'\"`=:"
# ``password: ...`` in more words than detect-secrets lists, with a full-width colon or
# Chinese "是" / "为", and values its pattern skips (one that starts with a symbol)
_LOCAL_PAIR = re.compile(
    r"(?i:密码|密碼|口令|支付密码|passwort|kennwort|mot de passe|contraseña|senha|пароль"
    r"|パスワード|비밀번호"
    r"|password|passwd|pwd|pin|(?P<key>api[_ -]?key|access[_ -]?token|secret[_ -]?key))"
    r"[\"']?\s*(?:[:：=]|是|为|為)\s*[\"']?"
    r"(?P<value>(?:(?![\[\]'\"(),;])[!-~])+)"  # printable ASCII: a password, not a sentence
)
MIN_KEY_CHARS = 8  # an API key or token is longer than a word; a password need not be
_VALUE_END = ".,;:。，；、)）]"
_OPENING = {")": "(", "）": "（", "]": "["}


# A value assigned to a name: ``export TOKEN=...``, ``api_key: "..."``, ``--token ...``,
# ``Authorization: Bearer ...`` (in a sentence, "my token is ...", see ``_SAID``). The name
# decides how random the value must look: a secret's name (token, secret, key, password, auth,
# credential) takes any value with a letter that is not a word or a placeholder; an
# environment variable's name (``export NAME=``, ``NAME=`` in capitals) takes a long,
# high-entropy value unless the name says it is an identifier (a commit, a hash, an id).
_ASSIGNMENT = re.compile(
    r"(?P<prefix>(?:\bexport|\bset|\bsetx|\$env:|(?<!\S)-e|\bENV)\s*)?"
    r"(?P<name>(?<![A-Za-z0-9_.\-])[A-Za-z_][A-Za-z0-9_.\-]*)"
    r"[\"'`]?(?P<link>\s*(?::=|=>|[=:：])\s*)"
    r"(?:(?:Bearer|Basic|Token|Bot)\s+)?"
    r"(?P<quote>[\"'`]?)(?P<value>(?:(?![\"'`])[!-~])+)"
)
# An identifier with a secret's stem, then a verb: "the GH_TOKEN is ...", "db_pass ist ..."
_NAMED_IN_SENTENCE = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]*(?i:token|secret|key|pass|pwd|auth|cred)"
    r"[A-Za-z0-9_.\-]*)(?P<link>\s+(?:is|was|ist|lautet|est|es|é|è)\s+)"
    r"(?P<quote>[\"'`]?)(?P<value>(?:(?![\"'`])[!-~])+)"
)
# A command-line flag: ``--api-key VALUE``, ``--token=VALUE``
_FLAG = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<name>--?[A-Za-z][A-Za-z0-9_\-]*)(?P<link>=|\s+)"
    r"(?P<quote>[\"'`]?)(?P<value>(?:(?![\"'`])[!-~])+)"
)
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
# "Token", "key" and "secret" in the languages of the templates people write in
_SECRET_WORDS = (
    "令牌|密钥|秘钥|密鑰|金鑰|凭证|凭据|憑證|トークン|シークレット|アクセスキー|キー|토큰|시크릿|키"
    "|schlüssel|jeton|clé|clef|clave|chave|chiave|sleutel|ключ|токен|секрет"
)
_SECRET_WORD = re.compile(_SECRET_WORDS, re.IGNORECASE)
_SECRET_PART = re.compile(
    r"tokens?|secrets?|keys?|apikey|password|passwd|passphrase|passcode|pwd|pass|auth"
    r"|authorization|credentials?|creds|cookie|bearer|private|privkey|jwt|salt|signature"
)
_SECRET_INSIDE = ("token", "secret", "passw", "apikey", "credential", "privkey")
# A name ending in one of these names what is not a secret: ``TOKEN_URL``, ``KEY_ID``, ``GIT_SHA``
_IDENTIFIER_PART = re.compile(
    r"ids?|uuid|guid|hash|sha|sha1|sha256|md5|commit|digest|checksum|etag|version|ver|rev"
    r"|revision|build|url|uri|path|file|dir|name|type|len|length|size|count|ttl|expiry|expires"
    r"|timeout|endpoint|host|port|region|user|username|email|format|alg|algorithm|header|kind"
    r"|field|prefix|env|mode|level"
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*[A-Z0-9]")
# Words, identifiers, versions and dates: what a secret's name is given when no secret is.
# Each part between "_", "-" and "." is a word (camel-cased or not) or an acronym, with at
# most four digits after it, or a short number.
_PART_SEPARATOR = re.compile(r"[_\-.]")
# Camel-cased words may carry one acronym before or after them: HTTPServer, PostgreSQL.
_WORD_PART = re.compile(
    r"(?:[A-Z]{2,}(?=[A-Z][a-z]))?(?:[A-Z]?[a-z]+)+(?:[A-Z]{2,})?[0-9]{0,4}|[A-Z]+[0-9]{0,4}"
    r"|[0-9]{1,4}"
)
_SYLLABLES = re.compile(r"[A-Z]?[a-z]+")
_VOWEL = re.compile(r"[aeiouy]", re.IGNORECASE)
_CONSONANTS = re.compile(r"[b-df-hj-np-tv-xz]{5}", re.IGNORECASE)
# What stands for a value: a placeholder (``<token>``, ``${TOKEN}``, ``[secret]``, ``***``), a
# command's output (``$(...)``), a literal
_PLACEHOLDER = re.compile(
    r"<[A-Za-z_\- ]+>?|\$\{?[A-Z_][A-Z0-9_]*\}?|\$\(.*|`.*|%[A-Z_][A-Z0-9_]*%|\{\{.*|\[.*"
    r"|[xX*.•]{3,}|(?i:changeme|redacted|none|null|true|false|yes|no)"
)
_CALL = re.compile(r"(?P<callee>[A-Za-z_][A-Za-z0-9_.]{2,})\(")  # ``s = Session(...)``
_ELIDED = ("...", "…")  # "msk_dev_..." shows a value's shape, not a value
_HEX = re.compile(r"[0-9a-fA-F]+")
MIN_HEX_KEY_CHARS = 16  # shorter hex is an id or a short hash ("key:4dc98e3a4b53")
_RANDOM_RUN = re.compile(r"[A-Za-z0-9+/]{16,}")  # 16: an unnamed value is told from a word
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9:.]+(?:Z|[+\-][0-9:]+)?)?")
MIN_ENTROPY_BITS = 3.0  # per character: an MD5's hex is ~3.7, a word ~2.8-3.3


# A secret said in a sentence: its name, at most two short words after it ("la clé API",
# "the API key", "A chave da API"), a verb or a colon, the value. A password's name takes a
# value with a digit or a symbol ("hunter2", "123456") or random letters; a key's or token's a
# longer one with a letter that is not a word.
_PASSWORD_WORDS = (
    "password|passwd|passphrase|passcode|passwort|kennwort|mot de passe|contraseña|senha"
    "|пароль|パスワード|비밀번호|密码|密碼|口令|暗証番号"
)
_SAID = re.compile(
    r"(?:(?<![A-Za-z])|(?![A-Za-z]))"  # a word of its own, or one in a script with no spaces
    rf"(?i:(?P<password>{_PASSWORD_WORDS})|token|secret|key|{_SECRET_WORDS})"
    r"(?:[ \-](?:[A-Za-zÀ-ÿ']{1,5}))?(?:[ \-](?:[A-Za-zÀ-ÿ']{1,5}))?"
    r"(?P<link>\s*[:：=]\s*|\s+(?:is|was|ist|lautet|est|es|é|è|sono)\s+|\s*(?:是|为|為|は)\s*)"
    r"[\"'`]?(?P<value>(?:(?![\"'`])[!-~])+)"
)
MIN_PASSWORD_CHARS = 6
# The words the two sentence rules start from, looked for first: most text names no secret, and
# a substring test is cheaper than a case-insensitive alternation tried at every character
_SECRET_STEMS = ("token", "secret", "key", "pass", "pwd", "auth", "cred")
_SAID_WORDS = tuple(w.lower() for w in f"{_PASSWORD_WORDS}|{_SECRET_WORDS}".split("|"))


def _said(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """The span of a secret said in a sentence (see ``_SAID``), if its value is one."""
    start, end = _pair_value(text, *m.span("value"))
    value = text[start:end]
    if text.startswith(_ELIDED, end):
        return None
    if m.group("password"):  # "hunter2", "123456", "Tr0ub4dor&3"; not "reset" or "incorrect"
        shaped = not value.isalpha() or not _is_word(value)
        taken = len(value) >= MIN_PASSWORD_CHARS and shaped and not _PLACEHOLDER.fullmatch(value)
        return (start, end) if taken else None
    return (start, end) if _key_like(value) else None


def _key_like(value: str) -> bool:
    """A value a key's or token's name may hold: long enough, with a letter (a date or a
    count is not a key), and not a word, a placeholder, a path or an address."""
    letters = any(c.isalpha() for c in value)
    short_hex = len(value) < MIN_HEX_KEY_CHARS and _HEX.fullmatch(value)
    return len(value) >= MIN_KEY_CHARS and letters and not short_hex and _not_a_word(value)


def _name_says(name: str) -> str | None:
    """Whether an assignment's name names a secret ("secret"), an identifier ("identifier")
    or neither (None), by its parts: ``GITHUB_TOKEN``, ``clientSecret``, ``api-key``."""
    if _SECRET_WORD.fullmatch(name):
        return "secret"
    parts = [p.lower() for p in _NAME_PARTS.findall(name)]
    if not parts:
        return None
    if _IDENTIFIER_PART.fullmatch(parts[-1]):
        return "identifier"
    if any(_SECRET_PART.fullmatch(p) or any(w in p for w in _SECRET_INSIDE) for p in parts):
        return "secret"
    return None


def _is_word(value: str) -> bool:
    """Whether ``value`` is made of words: ``created_at``, ``ProductionDatabase``, ``HTTP``.
    Each lower-case part has a vowel and no five consonants in a row, which random letters
    with the same shape ("pinbdzpfgYhpFz") do not."""
    if not all(_WORD_PART.fullmatch(part) for part in _PART_SEPARATOR.split(value) if part):
        return False
    return all(
        len(part) < 2 or (_VOWEL.search(part) and not _CONSONANTS.search(part))
        for part in _SYLLABLES.findall(value)
    )


def _entropy(value: str) -> float:
    """Shannon entropy of the value's characters, in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _is_call(value: str) -> bool:
    """Whether ``value`` is code calling a named function (``Session(...)``,
    ``client.over_http(memory``), not a password with a bracket in it."""
    call = _CALL.match(value)
    return call is not None and all(_is_word(p) for p in call.group("callee").split("."))


def _not_a_word(value: str) -> bool:
    """A value a secret's name may hold: not a word, an identifier, a placeholder, a path or
    an address."""
    return not (
        _is_word(value)
        or _PLACEHOLDER.fullmatch(value)
        or _TIMESTAMP.fullmatch(value)
        or _is_call(value)
        or value.startswith(("/", "~", "./"))
        or "://" in value
    )


def _high_entropy(value: str) -> bool:
    """A value that looks random with no name to say so: an unbroken run of 16 or more
    letters and digits (hex, base64, a random string; not a UUID's, a version's or an image
    name's short pieces), with digits or both cases, evenly spread, not a word."""
    if not _not_a_word(value):
        return False  # a path, an address, a time, a placeholder
    for run in _RANDOM_RUN.findall(value):
        mixed = any(c.isdigit() for c in run) or (
            any(c.isupper() for c in run) and any(c.islower() for c in run)
        )
        letters = any(c.isalpha() for c in run)
        if mixed and letters and not _is_word(run) and _entropy(run) >= MIN_ENTROPY_BITS:
            return True
    return False


def _assigned(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """The span of an assignment's value when it is a secret (see ``_ASSIGNMENT``)."""
    name, link = m.group("name"), m.group("link")
    start, end = _pair_value(text, *m.span("value"))
    if m.group("quote") and text[end : end + 1] != m.group("quote"):
        start, end = m.span("value")  # quoted: the value is all of it up to the quote
    value = text[start:end]
    if text.startswith(_ELIDED, end):
        return None
    says = _name_says(name)
    if says == "secret":
        return (start, end) if _key_like(value) else None
    env_style = m.groupdict().get("prefix") or (_ENV_NAME.fullmatch(name) and link.strip() == "=")
    if says is None and env_style and _high_entropy(value):
        return start, end
    return None


def _secret_span(plugin: type[RegexBasedDetector], m: re.Match[str], text: str) -> tuple[int, int]:
    """Where the value a plugin's match reports lies: its last group when the pattern ends
    with it (the password of a URL, an AWS secret in quotes), else the whole match, grown
    over the rest of the token (a JWT's signature) or the private key's body."""
    start, end = m.span()
    last = m.lastindex
    if last is not None and m.group(last) and m.end(last) >= end - 1 and m.start(last) > start:
        return m.span(last)
    if plugin is PrivateKeyDetector:
        head = text.rfind("-----", max(0, start - 8), start)
        close = _KEY_END.search(text, end)
        stop = close.end() if close is not None else _KEY_BODY.match(text, end).end()  # type: ignore[union-attr]
        return (head if head >= 0 else start), stop
    while start < end and text[start] in _TRIM:
        start += 1
    while end > start and text[end - 1] in _TRIM:
        end -= 1
    tail = _TOKEN_TAIL.match(text, end)
    return start, tail.end() if tail is not None else end


def _pair_value(text: str, start: int, end: int) -> tuple[int, int]:
    """A pair's value up to its first space and without the sentence's punctuation:
    detect-secrets reads a config line, where the value runs to the line's end."""
    value = text[start:end]
    cut = len(value.split(None, 1)[0]) if value.strip() else 0
    stop = start + cut
    while stop > start + 1 and text[stop - 1] in _VALUE_END:
        closing = _OPENING.get(text[stop - 1])
        if closing is not None and text.count(closing, 0, start) <= text.count(
            text[stop - 1], 0, start
        ):
            break  # no bracket open before the value: this one is part of it
        stop -= 1
    return start, stop


def find_secrets(text: str) -> list[Finding]:
    found: list[Finding] = []
    for plugin, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            start, end = _secret_span(plugin, m, text)
            if plugin is JwtTokenDetector and not JwtTokenDetector.is_formally_valid(
                text[start:end]
            ):
                continue
            if end > start:
                found.append(Finding("secret", start, end))
    for pattern, group in CONFIG_DENYLIST_REGEX_TO_GROUP.items():
        for m in pattern.finditer(text):
            start, end = _pair_value(text, *m.span(group))
            shown = _PLACEHOLDER.fullmatch(text[start:end]) or text.startswith(_ELIDED, end)
            if end > start and not shown:
                found.append(Finding("secret", start, end))
    for m in _LOCAL_PAIR.finditer(text):
        start, end = _pair_value(text, *m.span("value"))
        if m.group("key") and not _key_like(text[start:end]):
            continue  # "API key: set it in the dashboard" names no key
        shown = _PLACEHOLDER.fullmatch(text[start:end]) or text.startswith(_ELIDED, end)
        if end > start and not shown:
            found.append(Finding("secret", start, end))
    at = 0
    while (m := _ASSIGNMENT.search(text, at)) is not None:
        span = _assigned(m, text)
        if span is not None and span[1] > span[0]:
            found.append(Finding("secret", *span))
            at = span[1]
        else:  # the value may itself be an assignment: "config: TOKEN=..."
            at = m.end("link")
    lowered = text.lower()
    named = any(stem in lowered for stem in _SECRET_STEMS)
    sentences = _NAMED_IN_SENTENCE.finditer(text) if named else ()
    for m in chain(_FLAG.finditer(text), sentences):
        span = _assigned(m, text)
        if span is not None and span[1] > span[0]:
            found.append(Finding("secret", *span))
    said = named or any(word in lowered for word in _SAID_WORDS)
    for m in _SAID.finditer(text) if said else ():
        span = _said(m, text)
        if span is not None and span[1] > span[0]:
            found.append(Finding("secret", *span))
    return found


def find(text: str) -> list[Finding]:
    """The sensitive values of ``text``, in order, none overlapping (of two that overlap the
    earlier wins, then the longer, then national-id, card, iban, secret)."""
    if not text:
        return []
    found = find_numbers(text) + find_secrets(text)
    found.sort(key=lambda f: (f.start, -(f.end - f.start), PRIORITY[f.kind]))
    kept: list[Finding] = []
    for finding in found:
        if finding.end > finding.start and (not kept or finding.start >= kept[-1].end):
            kept.append(finding)
    return kept


def redact_text(text: str) -> tuple[str, Counter[str]]:
    """``text`` with each finding replaced by its placeholder, and the count per kind."""
    findings = find(text)
    if not findings:
        return text, Counter()
    parts: list[str] = []
    at = 0
    for f in findings:
        parts += [text[at : f.start], PLACEHOLDERS[f.kind]]
        at = f.end
    parts.append(text[at:])
    return "".join(parts), Counter(f.kind for f in findings)


class SensitiveDataError(InvalidInputError):
    """Sensitive data sent while ``MEMORY_PRIVACY__REDACTION=refuse``: nothing is written.
    The message names the field and the kind, never the value."""

    code = "sensitive_data"

    def __init__(self, what: str, kinds: Iterable[str]) -> None:
        named = ", ".join(DESCRIBED[k] for k in sorted(set(kinds), key=KINDS.index))
        super().__init__(
            f"{what} holds {named}: sensitive data is refused "
            "(MEMORY_PRIVACY__REDACTION=refuse; redact would store it as a placeholder)"
        )


class Redactor:
    """The rule applied with the configured mode; one per store, built from settings."""

    def __init__(self, mode: Mode = "redact") -> None:
        if mode not in MODES:
            raise ValueError(f"redaction mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode

    def text(self, value: str, what: str, counts: Counter[str]) -> str:
        """``value`` as it may be stored; its findings added to ``counts``."""
        if self.mode == "off" or not isinstance(value, str) or not value:
            return value  # not text: the field's own check refuses it
        redacted, found = redact_text(value)
        if found and self.mode == "refuse":
            raise SensitiveDataError(what, found)
        counts.update(found)
        return redacted

    def optional(self, value: str | None, what: str, counts: Counter[str]) -> str | None:
        return None if value is None else self.text(value, what, counts)

    def data(self, value: Any, what: str, counts: Counter[str]) -> Any:
        """JSON-like ``value`` (a message's metadata) with every string in it redacted."""
        if isinstance(value, str):
            return self.text(value, what, counts)
        if isinstance(value, Mapping):
            return {k: self.data(v, what, counts) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.data(v, what, counts) for v in value)
        return value

    def fact(self, fact: Fact, *, text: bool = True) -> tuple[Fact, Counter[str]]:
        """``fact`` with its text, key, tags and source redacted, and what was replaced.
        ``text=False``: its metadata only (an update, which keeps the stored text)."""
        counts: Counter[str] = Counter()
        if self.mode == "off":
            return fact, counts
        phrasings = tuple(  # an import line's: the wordings merged into the fact elsewhere
            replace(
                p,
                text=self.text(p.text, "a phrasing", counts) if text else p.text,
                source=self._source(p.source, counts),
            )
            for p in fact.phrasings
        )
        redacted = replace(
            fact,
            text=self.text(fact.text, "fact text", counts) if text else fact.text,
            key=self.optional(fact.key, "key", counts),
            tags=tuple(self.text(t, "a tag", counts) for t in fact.tags),
            source=self._source(fact.source, counts),
            phrasings=phrasings,
        )
        return (redacted if counts else fact), counts

    def _source(self, source: Source | None, counts: Counter[str]) -> Source | None:
        if source is None:
            return None
        return replace(
            source,
            origin=self.optional(source.origin, "source origin", counts),
            text=self.optional(source.text, "source text", counts),
        )

    def message(self, message: Msg) -> tuple[Msg, Counter[str]]:
        """``message`` with its content, tool calls, name and metadata redacted."""
        counts: Counter[str] = Counter()
        if self.mode == "off":
            return message, counts
        calls = tuple(
            ToolCall(c.id, c.name, self.text(c.arguments, "a tool call's arguments", counts))
            for c in message.tool_calls
        )
        redacted = replace(
            message,
            content=self.text(message.content, "message content", counts),
            name=self.optional(message.name, "a message's name", counts),
            metadata=self.data(dict(message.metadata), "a message's metadata", counts),
            tool_calls=calls,
        )
        return (redacted if counts else message), counts


def total(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Counts per kind summed over facts or messages, in ``KINDS`` order, zeros left out."""
    summed: Counter[str] = Counter()
    for c in counts:
        summed.update(c)
    return {k: summed[k] for k in KINDS if summed[k]}


def describe(counts: Mapping[str, int]) -> str:
    """What a tool or the CLI says of a write's redactions ("" when there were none)."""
    summed = total([counts])
    if not summed:
        return ""
    named = ", ".join(f"{n} {PLACEHOLDERS[k]}" for k, n in summed.items())
    return f"sensitive data replaced before storing: {named}"


__all__ = [
    "KINDS",
    "PLACEHOLDERS",
    "Finding",
    "Redactor",
    "SensitiveDataError",
    "describe",
    "find",
    "redact_text",
    "total",
]
