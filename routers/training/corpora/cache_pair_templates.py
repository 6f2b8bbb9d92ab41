"""The hand-written question frames behind cache_pairs_generated.jsonl.

A ``Frame`` has one slot ``{x}``; its ``fillers`` are pairs of values that change the
answer (empty: the kind's lexicon fills it, see cache_pairs.lexical_fillers).
The paraphrase rewrites are in cache_pair_rewrites.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    kind: str
    template: str
    text: str
    fillers: tuple[tuple[str, str], ...] = ()


def _pairs(*values: str) -> tuple[tuple[str, str], ...]:
    """Every unordered pair of the given values."""
    return tuple((a, b) for i, a in enumerate(values) for b in values[i + 1 :])


def _frames(kind: str, texts: list[str], fillers: tuple[tuple[str, str], ...] = ()) -> list[Frame]:
    return [Frame(kind, f"{kind}-t{i:02d}", t, fillers) for i, t in enumerate(texts)]


DIRECTIONS = (
    ("ascending", "descending"), ("increasing", "decreasing"), ("rising", "falling"),
    ("maximum", "minimum"), ("largest", "smallest"), ("highest", "lowest"),
    ("upper", "lower"), ("inner", "outer"), ("positive", "negative"), ("hot", "cold"),
    ("north", "south"), ("east", "west"), ("left", "right"), ("top", "bottom"),
    ("oldest", "newest"), ("longest", "shortest"),
)  # fmt: skip
SEASONS = _pairs("spring", "summer", "autumn", "winter")
MONTHS = _pairs("january", "march", "june", "august", "october", "december")
DAYS = _pairs("monday", "wednesday", "friday", "saturday", "sunday")
MEASURES = _pairs("mean", "median", "mode", "variance", "standard deviation", "range")
RESOURCES = _pairs("cpu", "memory", "disk", "network", "gpu")
DIMENSIONS = _pairs("length", "width", "height", "depth", "weight")
MEALS = _pairs("breakfast", "lunch", "dinner", "dessert")
PLANETS = _pairs("mercury", "venus", "mars", "jupiter", "saturn")
METALS = _pairs("iron", "copper", "aluminium", "gold", "silver", "zinc")
INSTRUMENTS = _pairs("piano", "violin", "guitar", "drums", "flute", "cello")
VERB_ACTIONS = (
    ("encrypt", "decrypt"), ("upload", "download"), ("import", "export"),
    ("install", "uninstall"), ("enable", "disable"), ("lock", "unlock"),
    ("mount", "unmount"), ("compress", "decompress"), ("serialize", "deserialize"),
    ("push", "pull"), ("insert", "delete"), ("open", "close"), ("start", "stop"),
    ("connect", "disconnect"), ("subscribe", "unsubscribe"), ("encode", "decode"),
    ("freeze", "unfreeze"), ("zip", "unzip"), ("merge", "split"), ("show", "hide"),
)  # fmt: skip
TIMES = (
    ("before", "after"), ("during", "after"), ("before", "during"),
    ("right before", "right after"), ("the day before", "the day after"),
    ("prior to", "following"), ("at the start of", "at the end of"),
    ("a week before", "a week after"), ("an hour before", "an hour after"),
)  # fmt: skip
DATES = (
    ("yesterday", "tomorrow"), ("last week", "next week"), ("last year", "next year"),
    ("this morning", "this evening"), ("last month", "next month"), ("today", "tomorrow"),
)  # fmt: skip
ROLES = (
    ("landlord", "tenant"), ("employer", "employee"), ("parent", "child"),
    ("teacher", "student"), ("client", "server"), ("buyer", "seller"),
    ("doctor", "patient"), ("manager", "worker"), ("lender", "borrower"),
    ("host", "guest"), ("predator", "prey"), ("customer", "supplier"),
)  # fmt: skip

FRAMES: list[Frame] = [
    # --- held-out kinds: the five near-miss kinds the issue reports, and role reversal ---
    *_frames(
        "antonym",
        [
            "What does it mean when a result is {x}?",
            "Give me three examples of something {x}.",
            "Why would a doctor describe a patient as {x}?",
            "Write a short poem about feeling {x}.",
            "How can I tell if a material is {x}?",
        ],
    ),
    *_frames(
        "antonym",
        [
            "How do I sort a list in {x} order in python?",
            "Why are prices {x} in my city right now?",
            "How do I find the {x} value in an excel column?",
            "Which way is {x} on a compass rose?",
        ],
        DIRECTIONS,
    ),
    *_frames(
        "negation_affix",
        [
            "Why is my relationship with my boss so {x}?",
            "Is it {x} to finish a marathon without training?",
            "What makes a contract {x}?",
            "Describe a situation that is {x}.",
            "How would you explain the word {x} to a child?",
        ],
    ),
    *_frames(
        "number_words",
        [
            "How many days are in {x} weeks?",
            "What is {x} percent of two hundred?",
            "How long does it take to walk {x} miles?",
            "Write a haiku with exactly {x} words.",
            "What was life like {x} years after the war?",
        ],
    ),
    *_frames(
        "category_member",
        ["What is the weather usually like in {x}?", "Which vegetables grow best in {x}?"],
        SEASONS,
    ),
    *_frames("category_member", ["What holidays fall in {x}?"], MONTHS),
    *_frames("category_member", ["Why do people feel tired on {x}?"], DAYS),
    *_frames(
        "category_member",
        [
            "How do I compute the {x} of a list of numbers?",
            "When is the {x} a better summary than the average?",
        ],
        MEASURES,
    ),
    *_frames(
        "category_member",
        ["Why is my server's {x} usage so high?", "How do I limit a docker container's {x}?"],
        RESOURCES,
    ),
    *_frames("category_member", ["What is the maximum {x} for carry-on luggage?"], DIMENSIONS),
    *_frames("category_member", ["What is a healthy {x} for a runner?"], MEALS),
    *_frames("category_member", ["How long is a day on {x}?"], PLANETS),
    *_frames("category_member", ["What is the melting point of {x}?"], METALS),
    *_frames("category_member", ["How long does it take an adult to learn the {x}?"], INSTRUMENTS),
    *_frames(
        "inverse_action",
        [
            "What does it mean to {x} something?",
            "Why would someone {x} in a negotiation?",
            "Is it ever wrong to {x}?",
        ],
    ),
    *_frames(
        "inverse_action",
        [
            "How do I {x} a file on linux?",
            "What is the command to {x} a package?",
            "Is it safe to {x} the drive while it is in use?",
            "How do I {x} a folder in one step?",
        ],
        VERB_ACTIONS,
    ),
    *_frames(
        "time_relative",
        [
            "What should I eat {x} a long run?",
            "Is it normal to feel dizzy {x} surgery?",
            "Should I stretch {x} lifting weights?",
            "How much water should I drink {x} a flight?",
            "What should I check {x} a job interview?",
        ],
        TIMES,
    ),
    *_frames(
        "time_relative",
        ["What is on the team calendar for {x}?", "Summarise the sales numbers from {x}."],
        DATES,
    ),
    *[
        Frame("role_reversal", f"role_reversal-t{i:02d}", text, tuple((a, b) for a, b in ROLES))
        for i, text in enumerate(
            [
                "Can a {x} sue a {y}?",
                "What does a {x} owe a {y}?",
                "How should a {x} apologise to a {y}?",
                "Can a {x} refuse to pay a {y}?",
                "What rights does a {x} have over a {y}?",
            ]
        )
    ],
    # --- kinds split by template: first half tune, second half held out ---
    *_frames(
        "number",
        [
            "How many calories are in {x} grams of rice?",
            "What is {x} divided by 7?",
            "How long should I boil an egg at {x} metres altitude?",
            "Is {x} a prime number?",
            "What was the population of the city in {x}?",
            "How many seconds are in {x} hours?",
        ],
        _pairs("12", "15", "30", "45", "100", "250", "1024"),
    ),
    *_frames(
        "negation",
        [
            "Is chocolate {x} safe for dogs?",
            "Why is the printer {x} working?",
            "Is coffee {x} bad for your heart?",
            "Why does my code {x} compile?",
            "Should I {x} tell my manager about the bug?",
            "Is it {x} legal to drive barefoot?",
        ],
        (("", "not"), ("", "never"), ("really", "not")),
    ),
    *_frames(
        "unit",
        [
            "How many {x} are in a mile?",
            "Convert one cup to {x}.",
            "How many {x} does a newborn weigh?",
            "What is the speed of sound in {x} per second?",
            "How many {x} of water should I drink a day?",
            "How many {x} is a marathon?",
        ],
        _pairs("feet", "metres", "yards", "kilometres", "inches", "litres", "ounces", "grams"),
    ),
    *_frames(
        "entity",
        [
            "What is the capital of {x}?",
            "What currency is used in {x}?",
            "What is the national dish of {x}?",
            "When did {x} join the United Nations?",
            "What language is spoken in {x}?",
            "How big is the army of {x}?",
        ],
        _pairs("France", "Spain", "Japan", "Brazil", "Kenya", "Canada", "Norway"),
    ),
    *_frames(
        "tense",
        [
            "Who {x} the captain of the team?",
            "Where {x} the meeting held?",
            "How much {x} a ticket cost?",
            "What {x} the main export of the region?",
            "Why {x} the bridge closed?",
            "Who {x} in charge of the project?",
        ],
        (("is", "was"), ("is", "will be"), ("was", "will be"), ("does", "did")),
    ),
    *_frames(
        "quantity",
        [
            "Is it safe to drink {x} coffee every day?",
            "Why do {x} people skip breakfast?",
            "Should I add {x} salt to the pasta water?",
            "What happens if I take {x} vitamin d?",
            "Do {x} students cheat on exams?",
            "Is it bad to eat {x} sugar?",
        ],
        _pairs("a little", "a lot of", "too much", "some", "no", "more", "less"),
    ),
    *_frames(
        "scope",
        [
            "How do I delete the {x} row of a pandas dataframe?",
            "Print the {x} element of a list.",
            "How do I select the {x} item in a css list?",
            "Remove the {x} character from a string.",
            "How do I get the {x} line of a file in bash?",
            "Which is the {x} page of the report?",
        ],
        _pairs("first", "last", "second", "middle", "every other"),
    ),
    *_frames(
        "scope",
        [
            "Do {x} birds fly south for the winter?",
            "Are {x} mushrooms poisonous?",
            "Do {x} cats hate water?",
            "Are {x} prime numbers odd?",
        ],
        _pairs("all", "some", "most", "no", "any"),
    ),
    *_frames(
        "comparative",
        [
            "Why is my laptop {x} than before?",
            "How do I make my code run {x}?",
            "Which metal is {x}, steel or titanium?",
            "Is it {x} to rent or to buy a house?",
            "Why does the tea taste {x} today?",
            "What makes one battery {x} than another?",
        ],
        _pairs("faster", "slower", "hotter", "louder", "cheaper", "better", "worse", "stronger"),
    ),
    *_frames(
        "domain_term",
        [
            "What is the {x} complexity of merge sort?",
            "How do I reduce the {x} of my api?",
            "Explain {x} in machine learning.",
            "What is a {x} in operating systems?",
            "When should I use a {x} in sql?",
            "What causes a {x} overflow?",
        ],
        (
            ("time", "space"),
            ("latency", "throughput"),
            ("precision", "recall"),
            ("process", "thread"),
            ("left join", "inner join"),
            ("stack", "heap"),
            ("shallow copy", "deep copy"),
            ("unit test", "integration test"),
            ("mutex", "semaphore"),
            ("bias", "variance"),
        ),
    ),
    *_frames(
        "language",
        [
            "How do I read a file line by line in {x}?",
            "How do I reverse a string in {x}?",
            "What is the best web framework for {x}?",
            "How do I say thank you in {x}?",
            "Translate the word house into {x}.",
            "How do I parse json in {x}?",
        ],
        _pairs("python", "rust", "go", "java", "french", "german", "spanish"),
    ),
    *_frames(
        "code_identifier",
        [
            "What does {x} do in python?",
            "Give an example of {x}.",
            "Is {x} slow on large inputs?",
            "What does {x} return when the input is empty?",
            "When should I avoid {x}?",
            "How do I mock {x} in a unit test?",
        ],
        (
            ("os.path.join", "os.path.split"),
            ("list.append", "list.extend"),
            ("dict.get", "dict.pop"),
            ("str.strip", "str.split"),
            ("git rebase", "git merge"),
            ("array.map", "array.filter"),
            ("json.load", "json.loads"),
            ("np.concatenate", "np.stack"),
            ("git reset", "git revert"),
            ("asyncio.gather", "asyncio.wait"),
        ),
    ),
    *_frames(
        "entity_swap",
        [
            "Who is older, {x}?",
            "Who finished first, {x}?",
            "Who was born first, {x}?",
            "How far is it from {x}?",
        ],
        (
            ("Alice or Bob", "Bob or Alice"),
            ("Madrid to Paris", "Paris to Madrid"),
            ("Lisbon to Rome", "Rome to Lisbon"),
            ("Tom or Anna", "Anna or Tom"),
            ("Ravi or Mei", "Mei or Ravi"),
            ("Oslo to Berlin", "Berlin to Oslo"),
        ),
    ),
]


def _numbered(frames: list[Frame]) -> list[Frame]:
    """Template ids numbered per kind, in order (several ``_frames`` calls share a kind)."""
    seen: dict[str, int] = {}
    out = []
    for frame in frames:
        n = seen[frame.kind] = seen.get(frame.kind, -1) + 1
        out.append(Frame(frame.kind, f"{frame.kind}-t{n:02d}", frame.text, frame.fillers))
    return out


FRAMES = _numbered(FRAMES)
