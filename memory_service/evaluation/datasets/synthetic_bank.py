"""The word banks of the synthetic benchmark: names, slots (a fact and two ways to ask it),
pets, bookings, CJK slots and distractor templates. Data only; ``synthetic`` draws from it.
The order of every tuple is part of the seed's contract: reordering changes the dataset."""

from __future__ import annotations

from dataclasses import dataclass

NAMES = (
    "Alice", "Bruno", "Chiara", "Deepak", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
    "Keiko", "Liam", "Mara", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tomas",
    "Ursula", "Vikram", "Wen", "Yusuf",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Slot:
    """One thing a user can have a fact about."""

    name: str
    kind: str
    values: tuple[dict[str, str], ...]
    fact: str
    keyword: str
    paraphrase: str
    update_fact: str | None = None  # how the newer fact is phrased; None: not updatable
    lang: str = "en"  # en | zh | ja: how a near-miss about someone else is phrased


def _v(**fields: str) -> dict[str, str]:
    return fields


SLOTS: tuple[Slot, ...] = (
    Slot(
        "job",
        "fact",
        (
            _v(a="pediatric nurse", b="the children's hospital"),
            _v(a="software engineer", b="a logistics startup"),
            _v(a="chemistry teacher", b="Lincoln High School"),
            _v(a="carpenter", b="a furniture workshop"),
            _v(a="accountant", b="a shipping company"),
            _v(a="veterinarian", b="a clinic for farm animals"),
        ),
        "{n} works as a {a} at {b}.",
        "Where does {n} work as a {a}?",
        "What does {n} do for a living?",
        update_fact="{n} started a new job as a {a} at {b}.",
    ),
    Slot(
        "city",
        "fact",
        (
            _v(a="Lisbon"),
            _v(a="Toronto"),
            _v(a="Osaka"),
            _v(a="Nairobi"),
            _v(a="Krakow"),
            _v(a="Melbourne"),
        ),  # fmt: skip
        "{n} lives in {a}.",
        "Does {n} live in {a}?",
        "Which town is {n}'s home these days?",
        update_fact="{n} moved to {a} and lives there now.",
    ),
    Slot(
        "diet",
        "preference",
        (
            _v(a="vegetarian"),
            _v(a="vegan"),
            _v(a="pescatarian"),
            _v(a="on a low-sodium diet"),
            _v(a="avoiding gluten"),
        ),  # fmt: skip
        "{n} is {a}.",
        "Is {n} {a}?",
        "What should I keep in mind when cooking dinner for {n}?",
        update_fact="{n} changed diet and is {a} now.",
    ),
    Slot(
        "allergy",
        "fact",
        (
            _v(a="peanuts"),
            _v(a="penicillin"),
            _v(a="bee stings"),
            _v(a="latex"),
            _v(a="shellfish"),
        ),  # fmt: skip
        "{n} is allergic to {a}.",
        "Does {n} have an allergy to {a}?",
        "Which substances give {n} a bad reaction?",
    ),
    Slot(
        "music",
        "preference",
        (
            _v(a="jazz", b="Miles Davis"),
            _v(a="classical music", b="Bach"),
            _v(a="hip hop", b="Kendrick Lamar"),
            _v(a="folk", b="Joni Mitchell"),
            _v(a="heavy metal", b="Metallica"),
        ),  # fmt: skip
        "{n}'s favourite music is {a}, especially {b}.",
        "Does {n} like {b}?",
        "What kind of songs does {n} enjoy listening to?",
    ),
    Slot(
        "seat",
        "preference",
        (_v(a="window"), _v(a="aisle"), _v(a="exit-row")),
        "{n} prefers {a} seats on long flights.",
        "Does {n} want a {a} seat on flights?",
        "Where does {n} like to sit on a plane?",
    ),
    Slot(
        "trip",
        "event",
        (
            _v(a="the Dolomites", b="June"),
            _v(a="Patagonia", b="March"),
            _v(a="the Scottish Highlands", b="September"),
            _v(a="Yosemite", b="October"),
            _v(a="the Atlas Mountains", b="April"),
        ),  # fmt: skip
        "{n} went hiking in {a} in {b}.",
        "When did {n} go hiking in {a}?",
        "Where did {n} spend the last trekking holiday?",
    ),
    Slot(
        "router",
        "procedure",
        (_v(a="WPS"), _v(a="reset"), _v(a="power")),
        "To fix the home router, {n} unplugs it for thirty seconds, then holds the {a} button.",
        "How does {n} fix the home router?",
        "What are {n}'s steps when the internet connection at the house stops working?",
    ),
    Slot(
        "coffee",
        "preference",
        (_v(a="a double espresso"), _v(a="green tea"), _v(a="an oat-milk latte"), _v(a="chai")),
        "{n} drinks {a} every morning.",
        "Does {n} drink {a} in the morning?",
        "What does {n} have to wake up at breakfast?",
        update_fact="{n} switched and now drinks {a} every morning.",
    ),
    Slot(
        "sibling",
        "fact",
        (
            _v(a="sister", b="Lotte", c="Ghent"),
            _v(a="brother", b="Mateo", c="Seville"),
            _v(a="twin sister", b="Anya", c="Tallinn"),
            _v(a="older brother", b="Kofi", c="Accra"),
        ),  # fmt: skip
        "{n} has a {a} called {b} who lives in {c}.",
        "What is the name of {n}'s {a}?",
        "Tell me about {n}'s family members.",
    ),
    Slot(
        "car",
        "fact",
        (
            _v(a="red", b="Volvo estate"),
            _v(a="silver", b="Toyota hatchback"),
            _v(a="dark green", b="Subaru Outback"),
            _v(a="white", b="Tesla Model 3"),
        ),  # fmt: skip
        "{n} drives a {a} {b}.",
        "What colour is {n}'s {b}?",
        "Which vehicle does {n} own?",
        update_fact="{n} sold the old car and now drives a {a} {b}.",
    ),
    Slot(
        "birthday",
        "fact",
        (_v(a="the 3rd of May"), _v(a="the 14th of February"), _v(a="the 29th of October")),
        "{n}'s birthday is on {a}.",
        "When is {n}'s birthday?",
        "On which day should we celebrate {n} getting a year older?",
    ),
    Slot(
        "medication",
        "procedure",
        (_v(a="levothyroxine"), _v(a="metformin"), _v(a="a vitamin D supplement")),
        "{n} takes {a} every evening after dinner.",
        "When does {n} take {a}?",
        "Is {n} on any regular medicine?",
    ),
)

PETS = (
    _v(a="dog", b="Biscuit"), _v(a="cat", b="Miso"), _v(a="parrot", b="Kiwi"),
    _v(a="rabbit", b="Clover"), _v(a="tortoise", b="Shelby"),
)  # fmt: skip
BOOKING_FACT = "{n}'s booking reference for the {a} flight is {code}."
BOOKING_QUESTION = "Which trip is booking reference {code} for?"
DESTINATIONS = (
    "Lisbon", "Oslo", "Bogota", "Cairo", "Seoul", "Reykjavik", "Lima", "Perth", "Hanoi", "Dakar",
)  # fmt: skip
BOOKINGS = 8
PET_FACT = "{n} adopted a {a} named {b} in {y}."
PET_QUESTIONS = ("Which animals does {n} keep at home?", "What are the names of {n}'s pets?")

CJK_SLOTS: tuple[Slot, ...] = (
    Slot(
        "fruit", "preference", (_v(a="芒果"), _v(a="荔枝"), _v(a="榴莲"), _v(a="草莓")),
        "{n}最喜欢的水果是{a}。", "{n}最喜欢的水果是什么？", "{n}平时爱吃哪种水果？", lang="zh",
    ),
    Slot(
        "hometown", "fact", (_v(a="成都"), _v(a="杭州"), _v(a="西安"), _v(a="厦门")),
        "{n}的老家在{a}。", "{n}的老家在哪里？", "{n}是哪里人？", lang="zh",
    ),
    Slot(
        "drink_ja", "preference", (_v(a="抹茶"), _v(a="ほうじ茶"), _v(a="ブラックコーヒー")),
        "{n}は毎朝{a}を飲みます。", "{n}は毎朝何を飲みますか？", "{n}の朝の飲み物は何ですか？",
        lang="ja",
    ),
    Slot(
        "hobby_ja", "event", (_v(a="書道"), _v(a="生け花"), _v(a="陶芸")),
        "{n}は去年から{a}を習っています。", "{n}は何を習っていますか？", "{n}の趣味は何ですか？",
        lang="ja",
    ),
)  # fmt: skip

DISTRACTORS: tuple[str, ...] = (
    "{n}'s colleague {p} works as a {job} at {org}.",
    "{n}'s neighbour adopted a {pet} named {pname}.",
    "{n} watched a documentary about {topic} on Sunday.",
    "{n}'s friend {p} moved to {city} last year.",
    "{n} read an article about restaurants in {city}.",
    "{n} helped {p} fix a bicycle with a flat tyre.",
    "{n}'s manager prefers {seat} seats when travelling.",
    "{n} bought a book about {topic} for {p}.",
    "{n}'s cousin {p} is allergic to {allergen}.",
    "{n} listened to a podcast about {topic} while driving to work.",
    "{n} recommended a {food} restaurant to {p}.",
    "{n}'s roommate {p} drinks {drink} late at night.",
    "{n}的同事喜欢吃{fruit}。",
    "{n}の友達は{city_ja}に住んでいます。",
    "{n}上周在{city_zh}出差了三天。",
    "{n}の同僚は{drink_ja}が苦手です。",
    "{n}'s aunt {p} used to teach {topic} at a night school.",
    "{n} is planning a weekend trip to {city} with {p}.",
    "{n} forgot the umbrella at {org} on a rainy {weekday}.",
    "{n}'s book club is reading a novel set in {city}.",
    "{n} gave {p} a {pet} plush toy as a birthday present.",
    "{n} cooked a {food} dish for the neighbours on {weekday}.",
)
FILL: dict[str, tuple[str, ...]] = {
    "p": ("Marco", "Sofia", "Dmitri", "Aisha", "Lena", "Pavel", "Noor", "Felix"),
    "job": ("dentist", "pilot", "chef", "librarian", "electrician", "architect"),
    "org": ("the airport", "a bakery", "the city library", "a design studio", "the town hall"),
    "pet": ("hamster", "goldfish", "beagle", "ferret"),
    "pname": ("Pepper", "Noodle", "Ziggy", "Mochi"),
    "topic": ("volcanoes", "deep-sea fish", "the Roman empire", "glaciers", "honeybees"),
    "city": ("Vienna", "Denver", "Porto", "Hanoi", "Quito"),
    "seat": ("aisle", "window", "middle"),
    "allergen": ("pollen", "dust mites", "cat hair"),
    "food": ("Ethiopian", "Georgian", "Peruvian", "Korean"),
    "drink": ("cold brew", "hot chocolate", "mint tea"),
    "fruit": ("苹果", "西瓜", "葡萄"),
    "city_ja": ("札幌", "福岡", "名古屋"),
    "city_zh": ("上海", "广州", "南京"),
    "drink_ja": ("コーヒー", "緑茶", "牛乳"),
    "weekday": ("Monday", "Wednesday", "Friday", "Saturday"),
}


OTHER_SUBJECT = {"en": "{n}'s friend {p}", "zh": "{n}的朋友{p}", "ja": "{n}の友達の{p}"}
