"""A second corpus for the redaction detector, its values made by a generator this project did
not write: ``Faker``.

The detector's rules were written against ``corpus.py``, so a score there checks the rules
against themselves. Here every value comes from Faker's own providers: card numbers of every
brand it knows (its base list: Visa 13/16/19, Mastercard, Amex, Discover, Diners, JCB 15/16,
Maestro; and its Russian, Chinese, Portuguese and Ukrainian lists), IBANs of twelve
countries, US SSNs, Chinese resident identity numbers (``Faker("zh_CN").ssn()``), and secrets
from ``password``, ``sha256``, ``sha1``, ``md5``, ``pystr`` and ``uuid4`` put in assignment
forms (shell, env files, YAML, JSON, TOML, command-line flags, HTTP headers, sentences). The
text around them is Faker's own sentences in eight locales, half the time with a word that
names the value ("card", "IBAN", "身份证") and half the time with none. The hard negatives
are what Faker makes that looks like a value: order and tracking numbers (16 digits among
them, so one in ten passes Luhn), phone numbers and MSISDNs of each locale, dates and Unix
times, ISBN-10/13, EAN-8/13, plain long numbers, BBANs, ITINs and EINs, Luhn-invalid cards,
identity numbers with a wrong check character, and assignments of what is not a secret
(``GIT_COMMIT=<sha1>``, ``REQUEST_ID=<uuid>``, ``export PATH=...``).

Seeded: every Faker instance and the choices among templates are seeded from ``seed``, and
Faker's Chinese identity numbers, which it dates back from today, are dated back from a
fixed day, so a seed gives the same sentences on any day.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import types
from collections.abc import Callable, Iterator
from unittest import mock

from faker import Faker
from faker.providers.ssn import zh_CN as zh_ssn
from stdnum import iban

from benchmarks.privacy.corpus import Sample

SEED = 20261205
TODAY = dt.date(2026, 12, 5)  # the day Faker's identity numbers are dated back from
LOCALES = ("en_US", "de_DE", "fr_FR", "es_ES", "zh_CN", "ja_JP", "ru_RU", "pt_BR")
IBAN_LOCALES = (
    "de_DE",
    "fr_FR",
    "es_ES",
    "it_IT",
    "nl_NL",
    "en_GB",
    "pl_PL",
    "pt_PT",
    "fi_FI",
    "nl_BE",
    "de_CH",
    "tr_TR",
)
# Faker's card lists: its base one (with its aliases, as ``credit_card_number()`` draws them)
# and the locales that have their own
CARD_LOCALES = ("en_US", "en_US", "en_US", "en_US", "ru_RU", "zh_CN", "pt_PT", "uk_UA")

# What a value is called, by locale: half the sentences name it, half do not
NAMES = {
    "card": {
        "en_US": ["card number", "my Visa", "credit card", "card"],
        "de_DE": ["Kartennummer", "Kreditkarte"],
        "fr_FR": ["numéro de carte", "carte bancaire"],
        "es_ES": ["número de tarjeta", "tarjeta"],
        "zh_CN": ["卡号", "银行卡", "信用卡号码"],
        "ja_JP": ["カード番号", "クレジットカード"],
        "ru_RU": ["номер карты", "карта"],
        "pt_BR": ["número do cartão", "cartão"],
    },
    "iban": {
        "en_US": ["IBAN", "account (IBAN)"],
        "de_DE": ["IBAN", "Kontonummer (IBAN)"],
        "fr_FR": ["IBAN", "RIB/IBAN"],
        "es_ES": ["IBAN", "cuenta IBAN"],
        "zh_CN": ["国际银行账号", "IBAN"],
        "ja_JP": ["IBAN", "口座番号（IBAN）"],
        "ru_RU": ["IBAN", "счёт IBAN"],
        "pt_BR": ["IBAN", "conta IBAN"],
    },
    "cn-ric": {
        "en_US": ["Chinese ID number", "resident ID"],
        "de_DE": ["chinesische Ausweisnummer"],
        "fr_FR": ["numéro d'identité chinois"],
        "es_ES": ["número de identidad chino"],
        "zh_CN": ["身份证号", "居民身份证号码", "身份证"],
        "ja_JP": ["身分証番号"],
        "ru_RU": ["номер китайского удостоверения"],
        "pt_BR": ["número de identidade chinês"],
    },
    "us-ssn": {
        "en_US": ["SSN", "social security number", "Social Security No."],
        "de_DE": ["US-Sozialversicherungsnummer (SSN)"],
        "fr_FR": ["numéro de sécurité sociale américain (SSN)"],
        "es_ES": ["número de seguro social (SSN)"],
        "zh_CN": ["美国社会安全号码", "SSN"],
        "ja_JP": ["社会保障番号（SSN）"],
        "ru_RU": ["номер социального страхования (SSN)"],
        "pt_BR": ["número do seguro social (SSN)"],
    },
}
LINKS = {  # between a name and its value
    "en_US": [": ", " is ", " "],
    "de_DE": [": ", " ist ", " "],
    "fr_FR": [" : ", " est ", " "],
    "es_ES": [": ", " es ", " "],
    "zh_CN": ["：", "是", ""],
    "ja_JP": ["：", "は", ""],
    "ru_RU": [": ", " — ", " "],
    "pt_BR": [": ", " é ", " "],
}
SECRET_NAMES = [
    "TOKEN",
    "API_TOKEN",
    "GITHUB_TOKEN",
    "ACCESS_TOKEN",
    "AUTH_TOKEN",
    "REFRESH_TOKEN",
    "SECRET",
    "SECRET_KEY",
    "CLIENT_SECRET",
    "WEBHOOK_SECRET",
    "JWT_SECRET",
    "SESSION_SECRET",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "ENCRYPTION_KEY",
    "SIGNING_KEY",
    "DB_PASSWORD",
    "PASSWORD",
    "SMTP_PASS",
    "apiKey",
    "accessToken",
    "clientSecret",
    "secret_token",
    "auth-token",
    "x-api-key",
]
SENTENCE_SECRET_NAMES = {
    "en_US": ["my token", "the API key", "the secret", "the password"],
    "de_DE": ["mein Token", "der API-Schlüssel", "das Passwort"],
    "fr_FR": ["mon jeton", "la clé API", "le mot de passe"],
    "es_ES": ["mi token", "la clave API", "la contraseña"],
    "zh_CN": ["我的令牌", "API 密钥", "密码"],
    "ja_JP": ["トークン", "APIキー", "パスワード"],
    "ru_RU": ["мой токен", "ключ API", "пароль"],
    "pt_BR": ["meu token", "a chave da API", "a senha"],
}
SENTENCE_LINKS = {
    "en_US": " is ",
    "de_DE": " ist ",
    "fr_FR": " est ",
    "es_ES": " es ",
    "zh_CN": "是",
    "ja_JP": "は",
    "ru_RU": ": ",
    "pt_BR": " é ",
}
ASSIGNMENTS: list[Callable[[str, str], str]] = [
    lambda n, v: f"export {n}={v}",
    lambda n, v: f'export {n}="{v}"',
    lambda n, v: f"{n}={v}",
    lambda n, v: f"{n}='{v}'",
    lambda n, v: f"set {n}={v}",
    lambda n, v: f'$env:{n} = "{v}"',
    lambda n, v: f"docker run -e {n}={v} app:latest",
    lambda n, v: f"{n.lower()}: {v}",
    lambda n, v: f'{{"{n.lower()}": "{v}"}}',
    lambda n, v: f'{n.lower()} = "{v}"',
    lambda n, v: f"--{n.lower().replace('_', '-')} {v}",
    lambda n, v: f"--{n.lower().replace('_', '-')}={v}",
]
# Names that are not a secret's, and what they hold
NOT_SECRET: list[Callable[[Faker], str]] = [
    lambda f: f"GIT_COMMIT={f.sha1()}",
    lambda f: f"export IMAGE_DIGEST=sha256:{f.sha256()}",
    lambda f: f"REQUEST_ID={f.uuid4()}",
    lambda f: f'{{"user_id": "{f.uuid4()}", "checksum": "{f.md5()}"}}',
    lambda f: f"export PATH=/usr/local/bin:{f.file_path(depth=2)}",
    lambda f: f"LANG={f.locale()}.UTF-8",
    lambda f: f"NODE_ENV={f.random_element(['production', 'staging', 'development'])}",
    lambda f: f"export HOME=/home/{f.user_name()}",
    lambda f: f"BUILD_NUMBER={f.random_number(digits=6)}",
    lambda f: f"version: {f.numerify('#.##.#')}",
    lambda f: f"commit {f.sha1()} fixed it",
    lambda f: f"the file's md5 is {f.md5()}",
    lambda f: f"API_URL={f.url()}",
    lambda f: f"sort_key: {f.word()}_{f.word()}",
    lambda f: f"TOKEN_TYPE=bearer, KEY_ID={f.uuid4()}",
]
ORDER_WORDS = {
    "en_US": ["Order #{n} shipped.", "Your order number is {n}.", "Invoice {n} is paid."],
    "de_DE": ["Bestellnummer {n} wurde versandt.", "Rechnung Nr. {n} ist bezahlt."],
    "fr_FR": ["N° de commande : {n}", "Facture {n} réglée."],
    "es_ES": ["Número de pedido {n}", "La factura {n} está pagada."],
    "zh_CN": ["订单号：{n}，已发货。", "发票号码{n}"],
    "ja_JP": ["注文番号は{n}です。", "請求書番号：{n}"],
    "ru_RU": ["Номер заказа {n} отправлен.", "Счёт {n} оплачен."],
    "pt_BR": ["Pedido {n} enviado.", "Fatura {n} paga."],
}
TRACKING_WORDS = [
    "Tracking number: {n}",
    "运单号 {n}",
    "Sendungsnummer {n}",
    "Numéro de suivi {n}",
    "Número de seguimiento: {n}",
    "追跡番号：{n}",
    "Трек-номер {n}",
    "Código de rastreio {n}",
]
PLAIN_NUMBERS = [
    "{s} {n}",
    "{n} {s}",
    "{s} ({n})",
    "#{n}",
    "{s} — {n}.",
]


@contextlib.contextmanager
def _dated_from(day: dt.date) -> Iterator[None]:
    """Faker's Chinese identity numbers take today's date to draw a birth date: give it
    ``day`` instead, so a seed makes the same numbers on any day."""

    class _Day(dt.date):
        @classmethod
        def today(cls) -> dt.date:
            return day

    fixed = types.SimpleNamespace(date=_Day, timedelta=dt.timedelta)
    with mock.patch.object(zh_ssn, "datetime", fixed):
        yield


class _Fakers:
    """One seeded Faker per locale, made when first asked for."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._made: dict[str, Faker] = {}

    def __call__(self, locale: str) -> Faker:
        if locale not in self._made:
            fake = Faker(locale)
            fake.seed_instance(f"{self.seed}:{locale}")
            self._made[locale] = fake
        return self._made[locale]


def _printed(rng: random.Random, number: str) -> str:
    """A card as people print it: solid, or in fours (Amex's 15 in 4-6-5) with spaces or
    dashes."""
    style = rng.choice(["solid", "solid", "space", "dash"])
    if style == "solid":
        return number
    sep = " " if style == "space" else "-"
    if len(number) == 15 and number[:2] in ("34", "37"):
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


def _in_sentence(rng: random.Random, fake: Faker, locale: str, kind: str, value: str) -> str:
    """``value`` in Faker's sentences of ``locale``, named by its kind's word or not."""
    before, after = fake.sentence(), fake.sentence()
    if rng.random() < 0.5:
        name = rng.choice(NAMES[kind][locale])
        link = rng.choice(LINKS[locale]) or (" " if name[-1].isascii() else "")
        core = name[0].upper() + name[1:] + link + value
    else:
        core = value
    join = "" if locale in ("zh_CN", "ja_JP") else " "
    shape = rng.choice(["start", "middle", "end"])
    if shape == "start":
        return f"{core}{join}{after}"
    if shape == "end":
        return f"{before}{join}{core}"
    return f"{before}{join}{core}{join}{after}"


def _card(rng: random.Random, fakers: _Fakers) -> str:
    locale = rng.choice(CARD_LOCALES)
    return fakers(locale).credit_card_number()


def _secret(rng: random.Random, fake: Faker, locale: str) -> tuple[str, str, str]:
    """A Faker-made secret in an assignment form; the text, the value and the form's family."""
    value = rng.choice(
        [
            lambda: fake.password(length=rng.randint(8, 20)),
            lambda: fake.password(length=rng.randint(12, 32), special_chars=False),
            fake.sha256,
            fake.sha1,
            fake.md5,
            lambda: fake.pystr(min_chars=16, max_chars=40),
            fake.uuid4,
        ]
    )()
    form = rng.random()
    if form < 0.55:
        name = rng.choice(SECRET_NAMES)
        assign = rng.choice(ASSIGNMENTS)
        if any(q in value for q in "'\"") or ("=" in value and "--" in assign("x", "")):
            assign = ASSIGNMENTS[1]
        return assign(name, value), value, "assignment"
    if form < 0.7:
        word = fake.word().upper()
        name = f"{word}_{rng.choice(['TOKEN', 'SECRET', 'KEY', 'PASSWORD'])}"
        return f"export {name}={value}", value, "named-env"
    if form < 0.8:
        header = rng.choice(["Authorization: Bearer {v}", "X-Api-Key: {v}", "Cookie: session={v}"])
        return f"{fake.sentence()} {header.format(v=value)}", value, "header"
    name = rng.choice(SENTENCE_SECRET_NAMES[locale])
    core = name[0].upper() + name[1:] + SENTENCE_LINKS[locale] + value
    join = "" if locale in ("zh_CN", "ja_JP") else " "
    return f"{fake.sentence()}{join}{core}", value, f"sentence-{locale[:2]}"


def positives(seed: int, n: int) -> list[Sample]:
    rng = random.Random(seed)
    fakers = _Fakers(seed)
    out: list[Sample] = []
    shares = [("card", 0.3), ("iban", 0.15), ("cn-ric", 0.15), ("us-ssn", 0.1), ("secret", 0.3)]
    with _dated_from(TODAY):
        for family, share in shares:
            for _ in range(round(n * share)):
                locale = rng.choice(LOCALES)
                fake = fakers(locale)
                if family == "card":
                    value = _printed(rng, _card(rng, fakers))
                    text = _in_sentence(rng, fake, locale, "card", value)
                    out.append(Sample(text, "card", value, family))
                elif family == "iban":
                    number = fakers(rng.choice(IBAN_LOCALES)).iban()
                    value = number if rng.random() < 0.5 else iban.format(number)
                    text = _in_sentence(rng, fake, locale, "iban", value)
                    out.append(Sample(text, "iban", value, family))
                elif family == "cn-ric":
                    value = fakers("zh_CN").ssn()
                    text = _in_sentence(rng, fake, locale, "cn-ric", value)
                    out.append(Sample(text, "national-id", value, family))
                elif family == "us-ssn":
                    value = fakers("en_US").ssn()
                    if rng.random() < 0.2:  # nine digits with no dashes: named, or not an SSN
                        value = value.replace("-", "")
                        name = rng.choice(NAMES["us-ssn"][locale])
                        link = rng.choice(LINKS[locale]) or (" " if name[-1].isascii() else "")
                        text = f"{fake.sentence()} {name}{link}{value}"
                    else:
                        text = _in_sentence(rng, fake, locale, "us-ssn", value)
                    out.append(Sample(text, "national-id", value, family))
                else:
                    text, value, form = _secret(rng, fake, locale)
                    out.append(Sample(text, "secret", value, form))
    rng.shuffle(out)
    return out


def _digits(fake: Faker, n: int) -> str:
    return fake.numerify("%" + "#" * (n - 1))


def _in_fours(number: str) -> str:
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4))


def negatives(seed: int, n: int) -> list[Sample]:
    rng = random.Random(seed + 1)
    fakers = _Fakers(seed + 1)

    def order() -> str:
        locale = rng.choice(LOCALES)
        fake = fakers(locale)
        number = _digits(fake, rng.choice([8, 10, 12, 14, 16, 16, 16, 18, 20]))
        return rng.choice(ORDER_WORDS[locale]).format(n=number)

    def tracking() -> str:
        fake = fakers("en_US")
        number = rng.choice(
            [
                lambda: fake.bothify("1Z###?##########").upper(),  # UPS
                lambda: _in_fours("9400" + _digits(fake, 18)),  # USPS, 22 digits
                lambda: _digits(fake, 12),  # FedEx
                lambda: _digits(fake, 15),  # FedEx Ground
                lambda: _digits(fake, 10),  # DHL
                lambda: "SF" + _digits(fake, 12),  # SF Express
            ]
        )()
        return rng.choice(TRACKING_WORDS).format(n=number)

    def phone() -> str:
        locale = rng.choice([*LOCALES, "en_GB", "it_IT", "ko_KR"])
        fake = fakers(locale)
        number = fake.phone_number() if rng.random() < 0.7 else fake.msisdn()
        return f"{fake.sentence()} {number}"

    def when() -> str:
        fake = fakers(rng.choice(LOCALES))
        moment = fake.date_time_between(dt.datetime(1990, 1, 1), dt.datetime(2030, 1, 1))
        shown = rng.choice(
            [
                moment.isoformat(),
                moment.strftime("%Y%m%d%H%M%S"),
                moment.strftime("%d/%m/%Y"),
                str(int(moment.timestamp())),
                str(int(moment.timestamp() * 1000)),
                str(int(moment.timestamp() * 1_000_000)),
            ]
        )
        return f"{fake.sentence()} {shown}"

    def product() -> str:
        fake = fakers("en_US")
        return rng.choice(
            [
                f"ISBN {fake.isbn13()}",
                f"ISBN {fake.isbn10()}",
                f"ISBN {fake.isbn13().replace('-', '')}",
                f"EAN {fake.ean13()}",
                f"{fake.ean13()}",
                f"barcode {fake.ean8()}",
            ]
        )

    def plain() -> str:
        locale = rng.choice(LOCALES)
        fake = fakers(locale)
        number = _digits(fake, rng.randint(9, 20))
        return rng.choice(PLAIN_NUMBERS).format(s=fake.sentence(), n=number)

    def invalid() -> str:
        fake = fakers("en_US")
        with _dated_from(TODAY):
            kind = rng.choice(["card", "ric", "ids"])
            if kind == "card":
                number = fakers(rng.choice(CARD_LOCALES)).credit_card_number()
                wrong = str((int(number[-1]) + rng.randint(1, 9)) % 10)
                return f"card {number[:-1]}{wrong}"
            if kind == "ric":
                number = fakers("zh_CN").ssn()
                wrong = rng.choice([c for c in "0123456789X" if c != number[-1]])
                return f"身份证号 {number[:-1]}{wrong}"
        return rng.choice(
            [
                f"BBAN {fake.bban()}",
                f"ITIN {fake.itin()}",
                f"EIN {fake.ein()}",
                f"account {fake.aba()}",
            ]
        )

    def not_secret() -> str:
        return rng.choice(NOT_SECRET)(fakers("en_US"))

    makers = {
        "order-number": order,
        "tracking-number": tracking,
        "phone": phone,
        "date": when,
        "isbn-ean": product,
        "plain-number": plain,
        "invalid-value": invalid,
        "not-a-secret": not_secret,
    }
    families = sorted(makers)
    out = [
        Sample(makers[families[i % len(families)]](), "none", "", families[i % len(families)])
        for i in range(n)
    ]
    rng.shuffle(out)
    return out


def corpus(n_positive: int = 1200, n_negative: int = 1200, seed: int = SEED) -> list[Sample]:
    """The positives and the hard negatives, each from its own seeded generators."""
    return positives(seed, n_positive) + negatives(seed, n_negative)
