"""A generated corpus for the redaction detector: sentences that hold one sensitive value each,
and hard negatives that look like one and are not.

Everything is made here from a seeded ``random.Random``: valid numbers with python-stdnum's
own check-digit functions (``luhn.calc_check_digit``, ``iban.calc_check_digits``,
``cn.ric.calc_check_digit``), secrets in their providers' published shapes, set in templates
of six languages (English, Chinese with full-width punctuation against the digits, German,
French, Spanish, Japanese) at the start, inside and at the end of a sentence, with spaces,
dashes or no separators. The negatives are what a conversation holds and a careless detector
takes: order numbers, phone numbers, dates, prices, Luhn-invalid card-shaped numbers, IBANs
and identity numbers with a wrong check, IMEIs (Luhn-valid, not cards), ISBNs, UUIDs, git
hashes, the service's own fact ids and content hashes, timestamps, and sentences that say
"password" without giving one.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from dataclasses import dataclass
from datetime import date, timedelta

from stdnum import iban, luhn
from stdnum.cn import ric
from stdnum.us import ssn

from indexing.hashing import content_hash
from memory_service.domain.facts import fact_id

SEED = 20261204
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits


@dataclass(frozen=True, slots=True)
class Sample:
    """One sentence; ``kind`` and ``value`` (the text a detector must cover) for a positive,
    ``kind`` "none" and the negative's family in ``family`` otherwise."""

    text: str
    kind: str
    value: str
    family: str


# -- templates: {v} is the value --------------------------------------------------------------

NUMBER_TEMPLATES = {
    "card": [
        "My card number is {v}, please keep it on file.",
        "Charge it to {v}.",
        "{v} is the Visa I use for travel.",
        "Card: {v} exp 09/28",
        "我的银行卡号是{v}，请帮我记住。",
        "卡号：{v}。",
        "请用尾号不同的那张卡（{v}）付款",
        "Meine Kreditkartennummer ist {v}.",
        "Ma carte bancaire : {v}, merci.",
        "Mi tarjeta es {v}; úsala para el hotel.",
        "カード番号は{v}です。",
        'payment = {{"card": "{v}"}}',
    ],
    "iban": [
        "Send the refund to {v} please.",
        "My IBAN is {v}.",
        "IBAN: {v} (BIC COBADEFFXXX)",
        "我的国际银行账号是{v}。",
        "Überweisung bitte auf {v}, danke!",
        "Mon IBAN : {v}",
        "La cuenta es {v}.",
        "口座は{v}です",
    ],
    "cn-ric": [
        "我的身份证号是{v}，登记的时候用。",
        "身份证：{v}。",
        "居民身份证号码{v}，地址在北京。",
        "Her Chinese ID number is {v}.",
        "ID {v} was used to book the train.",
        "身份証番号は{v}です。",
    ],
    "us-ssn": [
        "My SSN is {v}.",
        "Social security number: {v}, for the tax form.",
        "{v} is the SSN on the W-2.",
        "His social security no. {v} is on file",
        "美国社会安全号码是{v}。",
        "Sozialversicherungsnummer (SSN): {v}",
    ],
}

SECRET_TEMPLATES = [
    "Here is the key: {v}",
    "use {v} for the deploy",
    "export TOKEN={v}",
    "{v} is my token, don't share it.",
    "我的密钥是 {v} ，别外传。",
    "令牌：{v}",
    "Der Schlüssel lautet {v}.",
    "La clé est {v} .",
    "La clave es {v}",
    "トークンは {v} です",
]

PAIR_TEMPLATES = [
    ("en", "password: {v}"),
    ("en", "My wifi password: {v}"),
    ("en", "db_password = {v}"),
    ("en", "The admin passwd: {v} (change it monthly)"),
    ("en", 'config: {{"password": "{v}"}}'),
    ("en", "api_key: {v}"),
    ("zh", "我的密码：{v}，别忘了。"),
    ("zh", "邮箱密码是{v}。"),
    ("zh", "支付密码为{v}"),
    ("de", "Passwort: {v}"),
    ("de", "Das WLAN-Kennwort: {v}"),
    ("fr", "mot de passe : {v}"),
    ("es", "contraseña: {v}"),
    ("pt", "senha: {v}"),
    ("ru", "пароль: {v}"),
    ("ja", "パスワード：{v}"),
    ("ko", "비밀번호: {v}"),
]


# -- valid values -----------------------------------------------------------------------------

CARD_PREFIXES = [
    ("4", 16),
    ("4", 13),
    ("51", 16),
    ("55", 16),
    ("2221", 16),
    ("2720", 16),
    ("34", 15),
    ("37", 15),
    ("6011", 16),
    ("65", 16),
    ("62", 16),
    ("62", 19),
    ("3530", 16),
    ("36", 14),
]


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def card_number(rng: random.Random, *, valid: bool = True) -> str:
    prefix, length = rng.choice(CARD_PREFIXES)
    body = prefix + _digits(rng, length - len(prefix) - 1)
    check = luhn.calc_check_digit(body)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    return body + check


def spaced(rng: random.Random, number: str, kind: str = "card") -> str:
    """The number as people write it: solid, or in groups with spaces or dashes."""
    style = rng.choice(["solid", "space", "dash"])
    if style == "solid":
        return number
    sep = " " if style == "space" else "-"
    if kind == "card" and len(number) == 15:
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


IBAN_SHAPES = {  # country: (bban parts: (alphabet, length))
    "DE": ((string.digits, 18),),
    "GB": ((string.ascii_uppercase, 4), (string.digits, 14)),
    "NL": ((string.ascii_uppercase, 4), (string.digits, 10)),
    "CH": ((string.digits, 17),),
    "AT": ((string.digits, 16),),
    "BE": ((string.digits, 12),),
    "PL": ((string.digits, 24),),
    "SE": ((string.digits, 20),),
}


def iban_number(rng: random.Random, *, valid: bool = True) -> str:
    while True:
        country = rng.choice(sorted(IBAN_SHAPES))
        bban = "".join(
            "".join(rng.choice(alphabet) for _ in range(n)) for alphabet, n in IBAN_SHAPES[country]
        )
        number = country + "00" + bban
        check = iban.calc_check_digits(number)
        if not valid:
            check = f"{(int(check) + rng.randint(1, 50)) % 97 + 2:02d}"
        number = country + check + bban
        if iban.is_valid(number) == valid:
            return number


REGIONS = ["110101", "310104", "440305", "510107", "330106", "420102", "610113", "210102"]


def ric_number(rng: random.Random, *, valid: bool = True) -> str:
    while True:
        born = date(1950, 1, 1) + timedelta(days=rng.randrange(60 * 365))
        body = rng.choice(REGIONS) + born.strftime("%Y%m%d") + _digits(rng, 3)
        check = ric.calc_check_digit(body + "?")  # it reads all but the last character
        if not valid:
            check = rng.choice([c for c in "0123456789X" if c != check])
        if ric.is_valid(body + check) == valid:
            return body + check


def ssn_number(rng: random.Random) -> str:
    while True:
        number = f"{rng.randint(1, 899):03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"
        if ssn.is_valid(number):
            return number


def _b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def provider_secret(rng: random.Random) -> tuple[str, str]:
    """A token in one provider's shape, and the provider's name."""
    provider = rng.choice(
        [
            "github",
            "aws",
            "slack",
            "stripe",
            "openai",
            "jwt",
            "gitlab",
            "sendgrid",
            "google",
            "anthropic",
            "telegram",
            "basic-auth",
            "private-key",
        ]
    )
    lower_digits = string.ascii_lowercase + string.digits
    value = {
        "github": lambda: rng.choice(["ghp_", "gho_", "ghs_"]) + _rand(rng, ALNUM, 36),
        "aws": lambda: rng.choice(["AKIA", "ASIA"]) + _rand(rng, UPPER_DIGITS, 16),
        "slack": lambda: (
            f"xoxb-{_digits(rng, 11)}-{_digits(rng, 12)}-" + _rand(rng, lower_digits, 24)
        ),
        "stripe": lambda: rng.choice(["sk_live_", "rk_live_"]) + _rand(rng, ALNUM, 24),
        "openai": lambda: "sk-proj-" + _rand(rng, ALNUM, 20) + "T3BlbkFJ" + _rand(rng, ALNUM, 20),
        "jwt": lambda: ".".join(
            [
                _b64url({"alg": "HS256", "typ": "JWT"}),
                _b64url({"sub": _digits(rng, 6), "name": "Ann", "iat": 1700000000}),
                _rand(rng, ALNUM + "-_", 43),
            ]
        ),
        "gitlab": lambda: "glpat-" + _rand(rng, ALNUM, 20),
        "sendgrid": lambda: "SG." + _rand(rng, ALNUM, 22) + "." + _rand(rng, ALNUM, 43),
        "google": lambda: "AIza" + _rand(rng, ALNUM + "-_", 35),
        "anthropic": lambda: "sk-ant-api03-" + _rand(rng, ALNUM + "-_", 40),
        "telegram": lambda: _digits(rng, 9) + ":" + _rand(rng, ALNUM + "_-", 35),
        "basic-auth": lambda: _rand(rng, ALNUM, 12),
        "private-key": lambda: "\n".join(
            [
                "-----BEGIN RSA PRIVATE KEY-----",
                *(_rand(rng, ALNUM + "+/", 64) for _ in range(3)),
                "-----END RSA PRIVATE KEY-----",
            ]
        ),
    }[provider]()
    return value, provider


def password(rng: random.Random) -> str:
    words = ["tiger", "Sunny", "maple", "Orion", "kiwi", "Dragon", "lotus"]
    shape = rng.choice(["word", "random", "digits"])
    if shape == "word":
        return rng.choice(words) + _digits(rng, rng.randint(2, 4)) + rng.choice(["", "!", "#"])
    if shape == "digits":
        return _digits(rng, 6)
    return _rand(rng, ALNUM + "!@#$%^&*_-", rng.randint(8, 16))


# -- the corpus -------------------------------------------------------------------------------


def positives(rng: random.Random, n: int) -> list[Sample]:
    out: list[Sample] = []
    shares = [("card", 0.3), ("iban", 0.15), ("cn-ric", 0.15), ("us-ssn", 0.1), ("secret", 0.3)]
    for family, share in shares:
        for _ in range(round(n * share)):
            if family == "card":
                value = spaced(rng, card_number(rng))
                text = rng.choice(NUMBER_TEMPLATES["card"]).format(v=value)
                out.append(Sample(text, "card", value, family))
            elif family == "iban":
                number = iban_number(rng)
                value = number if rng.random() < 0.5 else iban.format(number)
                text = rng.choice(NUMBER_TEMPLATES["iban"]).format(v=value)
                out.append(Sample(text, "iban", value, family))
            elif family == "cn-ric":
                value = ric_number(rng)
                text = rng.choice(NUMBER_TEMPLATES["cn-ric"]).format(v=value)
                out.append(Sample(text, "national-id", value, family))
            elif family == "us-ssn":
                number = ssn_number(rng)
                value = f"{number[:3]}-{number[3:5]}-{number[5:]}" if rng.random() < 0.8 else number
                text = rng.choice(NUMBER_TEMPLATES["us-ssn"]).format(v=value)
                out.append(Sample(text, "national-id", value, family))
            elif rng.random() < 0.45:
                value = password(rng)
                lang, template = rng.choice(PAIR_TEMPLATES)
                out.append(Sample(template.format(v=value), "secret", value, f"pair-{lang}"))
            else:
                value, provider = provider_secret(rng)
                if provider == "basic-auth":
                    text = f"the dashboard is https://admin:{value}@grafana.internal:3000/"
                else:
                    text = rng.choice(SECRET_TEMPLATES).format(v=value)
                out.append(Sample(text, "secret", value, provider))
    rng.shuffle(out)
    return out


NEGATIVE_WORDS = [
    "I forgot my password again, can you send a reset link?",
    "The password reset email never arrived.",
    "密码忘了，怎么重置？",
    "Our secret recipe uses brown butter.",
    "Pin the tab so it stays open.",
    "The API key rotation is scheduled for Friday.",
    "Passwort vergessen? Klicken Sie hier.",
    "La contraseña debe tener ocho caracteres.",
    "Use a password manager for every account.",
    "パスワードを変更してください。",
    "No API key: set one in the dashboard first.",
    "密码：请在设置里修改",
]


def negatives(rng: random.Random, n: int) -> list[Sample]:
    makers = {
        "order-number": lambda: rng.choice(
            [
                f"Order #{_digits(rng, 8)} shipped today.",
                f"订单号：{date(2024, 1, 1).strftime('%Y%m%d')}{_digits(rng, 10)}，已发货。",
                f"Your order A-{rng.randint(2020, 2026)}-{_digits(rng, 6)} is on its way",
                f"Bestellnummer {_digits(rng, 12)} wurde storniert.",
            ]
        ),
        "phone": lambda: rng.choice(
            [
                f"Call me at +1 ({_digits(rng, 3)}) {_digits(rng, 3)}-{_digits(rng, 4)}.",
                f"我的手机号是1{rng.choice('3589')}{_digits(rng, 9)}。",
                f"电话：+86 1{rng.choice('3589')}{_digits(rng, 1)} {_digits(rng, 4)} "
                f"{_digits(rng, 4)}",
                f"Ring +44 20 {_digits(rng, 4)} {_digits(rng, 4)} after six",
                f"Telefon: +49 30 {_digits(rng, 8)}",
                f"office line {_digits(rng, 3)}-{_digits(rng, 3)}-{_digits(rng, 4)}",
            ]
        ),
        "date": lambda: rng.choice(
            [
                f"The meeting is on {2020 + rng.randint(0, 6)}-0{rng.randint(1, 9)}-"
                f"{rng.randint(10, 28)}.",
                f"会议定在{rng.randint(2020, 2026)}年{rng.randint(1, 12)}月"
                f"{rng.randint(1, 28)}日。",
                f"Born {rng.randint(10, 28)}/{rng.randint(10, 12)}/{rng.randint(1950, 2010)}",
                f"backup-{rng.randint(2020, 2026)}{rng.randint(10, 12)}{rng.randint(10, 28)}.tar",
            ]
        ),
        "price": lambda: rng.choice(
            [
                f"It cost ${rng.randint(1, 9)},{_digits(rng, 3)}.{_digits(rng, 2)} in total.",
                f"总价¥{rng.randint(1, 999)},{_digits(rng, 3)},{_digits(rng, 3)}.{_digits(rng, 2)}",
                f"Preis: {rng.randint(1, 99)}.{_digits(rng, 3)},{_digits(rng, 2)} €",
            ]
        ),
        "luhn-invalid-card": lambda: rng.choice(NUMBER_TEMPLATES["card"]).format(
            v=spaced(rng, card_number(rng, valid=False))
        ),
        "invalid-iban": lambda: rng.choice(NUMBER_TEMPLATES["iban"]).format(
            v=iban_number(rng, valid=False)
        ),
        "invalid-ric": lambda: rng.choice(NUMBER_TEMPLATES["cn-ric"]).format(
            v=ric_number(rng, valid=False)
        ),
        "imei": lambda: f"IMEI {_imei(rng)} registered to the phone",
        "isbn": lambda: (
            f"ISBN 978-{rng.randint(0, 9)}-{_digits(rng, 2)}-{_digits(rng, 6)}-{rng.randint(0, 9)}"
        ),
        "uuid": lambda: f"request id {uuid.UUID(int=rng.getrandbits(128), version=4)}",
        "git-hash": lambda: rng.choice(
            [
                f"fixed in commit {_rand(rng, '0123456789abcdef', 40)}",
                f"see {_rand(rng, '0123456789abcdef', 7)} on main",
            ]
        ),
        "fact-id": lambda: (
            f"fact {fact_id('acme', f'user-{rng.randint(1, 999)}', _rand(rng, ALNUM, 16))}"
            " was superseded"
        ),
        "content-hash": lambda: f"content_hash {content_hash(_rand(rng, ALNUM, 30))}",
        "timestamp": lambda: rng.choice(
            [
                f"created_at 1{_digits(rng, 9)}",
                f"ts={1_700_000_000_000 + rng.randrange(10**11)}",
                f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T0{rng.randint(0, 9)}:"
                f"{rng.randint(10, 59)}:00.{_digits(rng, 6)}Z",
            ]
        ),
        "words": lambda: rng.choice(NEGATIVE_WORDS),
        "ip-version": lambda: rng.choice(
            [
                f"server 10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}",
                f"upgrade to v{rng.randint(1, 9)}.{_digits(rng, 3)}.{_digits(rng, 4)}",
            ]
        ),
    }
    families = sorted(makers)
    out = []
    for i in range(n):
        family = families[i % len(families)]
        out.append(Sample(makers[family](), "none", "", family))
    rng.shuffle(out)
    return out


def _imei(rng: random.Random) -> str:
    body = "35" + _digits(rng, 12)
    return body + luhn.calc_check_digit(body)


def corpus(n_positive: int = 1200, n_negative: int = 1200, seed: int = SEED) -> list[Sample]:
    """The positives and the negatives, each list made from its own seeded generator."""
    return positives(random.Random(seed), n_positive) + negatives(
        random.Random(seed + 1), n_negative
    )
