"""An offline generator of varied everyday English sentences: the text the teacher voice reads.

Templates with slots, filled from word lists written for this file (no outside text, so nothing
to license). Sentences mix statements, questions, requests, numbers, times, prices and dates
(written with digits and symbols: the normaliser spells them out before the teacher speaks).

With a word list (`/usr/share/dict/words` from Debian's `wamerican`, SCOWL: free to use and
redistribute), a share of the sentences carry rare dictionary words in fixed frames, so the model
hears far more spellings than the templates hold; held-out sentences never use the word list.

Held-out sentences for evaluation are a fixed hash bucket: `is_heldout(text)` is true for about
one sentence in 64, `training_sentences` never yields one, `heldout_sentences` yields only
those. The benchmark workload (bench/tts_workload.jsonl) is not used here.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

NAMES = [
    "Anna",
    "Ben",
    "Carla",
    "David",
    "Emma",
    "Frank",
    "Grace",
    "Henry",
    "Isabel",
    "Jack",
    "Karen",
    "Leo",
    "Maria",
    "Nathan",
    "Olivia",
    "Peter",
    "Quinn",
    "Rachel",
    "Sam",
    "Tina",
    "Umar",
    "Vera",
    "Walter",
    "Yusuf",
    "Zoe",
    "Alice",
    "Bob",
    "Chloe",
    "Daniel",
    "Ella",
    "Felix",
    "Hannah",
    "Ivan",
    "Julia",
    "Kevin",
    "Laura",
    "Mike",
    "Nina",
    "Oscar",
    "Paula",
    "Rosa",
    "Simon",
    "Tom",
    "Ursula",
    "Victor",
    "Wendy",
    "Xavier",
    "Yara",
    "Zach",
    "Amir",
    "Beth",
    "Chris",
    "Diana",
    "Eric",
    "Fiona",
    "George",
    "Helen",
    "Ian",
    "Jenny",
    "Kyle",
    "Lucy",
    "Mark",
    "Nora",
    "Owen",
    "Priya",
    "Ruth",
    "Steve",
    "Tara",
    "Vince",
    "Will",
    "Sofia",
    "Lena",
    "Marco",
    "Aisha",
    "Kenji",
    "Mei",
    "Raj",
    "Omar",
    "Elena",
]
PLACES = [
    "the kitchen",
    "the office",
    "the park",
    "the station",
    "the library",
    "the market",
    "the beach",
    "the garden",
    "the hospital",
    "the airport",
    "the bakery",
    "the school",
    "the museum",
    "the gym",
    "the bank",
    "the post office",
    "the hotel",
    "the cafe",
    "the river",
    "the mountains",
    "the city center",
    "the parking lot",
    "the bus stop",
    "the supermarket",
    "the pharmacy",
    "the cinema",
    "the stadium",
    "the harbor",
    "the village",
    "the farm",
    "the living room",
    "the basement",
    "the attic",
    "the bathroom",
    "the balcony",
    "the corner shop",
    "the train platform",
    "the playground",
    "the dentist",
    "the town hall",
    "the bookstore",
    "the lake",
]
CITIES = [
    "London",
    "Paris",
    "Berlin",
    "Madrid",
    "Rome",
    "Chicago",
    "Boston",
    "Seattle",
    "Denver",
    "Dallas",
    "Toronto",
    "Sydney",
    "Tokyo",
    "Dublin",
    "Vienna",
    "Prague",
    "Lisbon",
    "Oslo",
    "Cairo",
    "Mumbai",
    "Lima",
    "Austin",
    "Portland",
    "Atlanta",
    "Miami",
    "Phoenix",
]
THINGS = [
    "umbrella",
    "laptop",
    "bicycle",
    "sandwich",
    "letter",
    "ticket",
    "camera",
    "jacket",
    "wallet",
    "phone",
    "key",
    "backpack",
    "coffee",
    "newspaper",
    "blanket",
    "lamp",
    "chair",
    "window",
    "bottle",
    "notebook",
    "pencil",
    "guitar",
    "basket",
    "map",
    "suitcase",
    "package",
    "watch",
    "recipe",
    "report",
    "invoice",
    "printer",
    "kettle",
    "mirror",
    "ladder",
    "bucket",
    "candle",
    "sweater",
    "scarf",
    "helmet",
    "charger",
    "receipt",
    "calendar",
    "passport",
    "envelope",
    "toaster",
    "pillow",
    "bowl",
    "plate",
    "spoon",
    "fork",
    "knife",
    "towel",
    "shovel",
    "hammer",
    "battery",
    "clock",
    "radio",
    "painting",
    "puzzle",
    "kite",
    "ball",
    "tablet",
    "keyboard",
    "speaker",
    "microphone",
    "cable",
    "drawer",
    "cupboard",
    "fridge",
    "oven",
    "sofa",
    "carpet",
    "curtain",
]
FOODS = [
    "soup",
    "pasta",
    "rice",
    "bread",
    "cheese",
    "apples",
    "oranges",
    "bananas",
    "tomatoes",
    "potatoes",
    "carrots",
    "onions",
    "chicken",
    "fish",
    "salad",
    "pizza",
    "noodles",
    "eggs",
    "butter",
    "honey",
    "yogurt",
    "cereal",
    "pancakes",
    "cookies",
    "cake",
    "tea",
    "juice",
    "milk",
    "lemonade",
    "chocolate",
    "strawberries",
    "grapes",
    "beans",
    "mushrooms",
    "peppers",
    "garlic",
    "sausages",
    "dumplings",
    "tacos",
    "curry",
    "oatmeal",
    "muffins",
    "peaches",
    "cherries",
    "lettuce",
    "cucumbers",
]
ANIMALS = [
    "dog",
    "cat",
    "horse",
    "rabbit",
    "bird",
    "duck",
    "goat",
    "sheep",
    "cow",
    "fox",
    "owl",
    "bear",
    "deer",
    "mouse",
    "squirrel",
    "turtle",
    "parrot",
    "frog",
    "goose",
    "pony",
    "puppy",
    "kitten",
    "hamster",
    "dolphin",
    "whale",
    "eagle",
    "pigeon",
]
ADJECTIVES = [
    "quiet",
    "busy",
    "bright",
    "dark",
    "warm",
    "cold",
    "small",
    "large",
    "old",
    "new",
    "clean",
    "messy",
    "heavy",
    "light",
    "soft",
    "loud",
    "early",
    "late",
    "cheap",
    "expensive",
    "simple",
    "strange",
    "lovely",
    "friendly",
    "careful",
    "tired",
    "happy",
    "hungry",
    "curious",
    "gentle",
    "brave",
    "calm",
    "lucky",
    "serious",
    "funny",
    "empty",
    "crowded",
    "narrow",
    "wide",
    "sunny",
    "rainy",
    "windy",
    "cloudy",
    "fresh",
    "sweet",
    "bitter",
    "salty",
    "spicy",
    "smooth",
    "rough",
    "shiny",
    "broken",
    "useful",
    "comfortable",
]
COLORS = [
    "red",
    "blue",
    "green",
    "yellow",
    "black",
    "white",
    "gray",
    "brown",
    "orange",
    "purple",
    "pink",
    "silver",
    "golden",
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
TIMES = [
    "this morning",
    "this afternoon",
    "tonight",
    "tomorrow",
    "yesterday",
    "next week",
    "last week",
    "on the weekend",
    "in the evening",
    "after lunch",
    "before dinner",
    "at noon",
    "right now",
    "later today",
    "in a few minutes",
    "next month",
    "last year",
    "every day",
    "once a week",
    "in the spring",
    "in the summer",
    "in the autumn",
    "in the winter",
    "after work",
    "before breakfast",
    "at midnight",
    "soon",
    "all day",
]
# (present tense, past tense, object kind): what can be done to what.
VERBS = (
    ("find", "found", "thing"),
    ("buy", "bought", "thing"),
    ("bring", "brought", "thing"),
    ("fix", "fixed", "thing"),
    ("carry", "carried", "thing"),
    ("borrow", "borrowed", "thing"),
    ("clean", "cleaned", "thing"),
    ("open", "opened", "thing"),
    ("paint", "painted", "thing"),
    ("sell", "sold", "thing"),
    ("wrap", "wrapped", "thing"),
    ("return", "returned", "thing"),
    ("cook", "cooked", "food"),
    ("eat", "ate", "food"),
    ("order", "ordered", "food"),
    ("share", "shared", "food"),
    ("taste", "tasted", "food"),
    ("pack", "packed", "food"),
    ("visit", "visited", "place"),
    ("leave", "left", "place"),
    ("clean", "cleaned", "place"),
    ("call", "called", "person"),
    ("meet", "met", "person"),
    ("help", "helped", "person"),
    ("thank", "thanked", "person"),
    ("invite", "invited", "person"),
    ("watch", "watched", "animal"),
    ("feed", "fed", "animal"),
    ("follow", "followed", "animal"),
    ("photograph", "photographed", "animal"),
)
INTRANSITIVE = (
    ("laugh", "laughed"),
    ("sleep", "slept"),
    ("arrive", "arrived"),
    ("wait", "waited"),
    ("run", "ran"),
    ("sing", "sang"),
    ("rest", "rested"),
    ("smile", "smiled"),
    ("work", "worked"),
    ("travel", "traveled"),
    ("study", "studied"),
    ("relax", "relaxed"),
    ("swim", "swam"),
    ("dance", "danced"),
    ("walk", "walked"),
    ("cough", "coughed"),
    ("listen", "listened"),
)
FEELINGS = [
    "glad",
    "sorry",
    "surprised",
    "worried",
    "excited",
    "pleased",
    "relieved",
    "disappointed",
    "sure",
    "afraid",
    "proud",
    "amazed",
    "curious",
    "confused",
]
OPENERS = [
    "Well,",
    "Honestly,",
    "By the way,",
    "Actually,",
    "To be fair,",
    "In any case,",
    "Luckily,",
    "Sadly,",
    "Of course,",
    "Meanwhile,",
    "Oh,",
    "So,",
    "Still,",
    "Anyway,",
    "Frankly,",
    "Sometimes,",
    "Usually,",
    "Apparently,",
    "Right,",
    "Okay,",
]
CONNECTORS = ("and", "but", "so", "because", "although", "while", "until", "after", "before")
PHRASES = [
    "Good morning, how are you today?",
    "Thank you very much for your help.",
    "Could you say that again?",
    "I will be there in a minute.",
    "Please take a seat.",
    "Let me check that for you.",
    "That sounds like a great idea.",
    "Have a nice weekend.",
    "See you later.",
    "I am not sure about that.",
    "Can I ask you a quick question?",
    "It was nice to meet you.",
    "Excuse me, where is the exit?",
    "Sorry, I did not catch your name.",
    "What time does the shop close?",
    "Welcome back!",
    "Please hold the line.",
    "Your order is on its way.",
    "The meeting has been moved.",
    "Do you need anything else?",
    "I think we are almost done.",
    "Let us try once more.",
    "Thanks for waiting.",
    "Mind the gap.",
    "The door is on your left.",
    "Happy birthday!",
]


def _a(word: str) -> str:
    return ("an " if word[0].lower() in "aeiou" else "a ") + word


def _obj(rng: random.Random, kind: str) -> str:
    if kind == "thing":
        thing = rng.choice(THINGS)
        return rng.choice(
            [
                f"the {thing}",
                _a(thing),
                f"the {rng.choice(ADJECTIVES)} {thing}",
                f"{rng.choice(NAMES)}'s {thing}",
                f"the {rng.choice(COLORS)} {thing}",
            ]
        )
    if kind == "food":
        return rng.choice(
            [rng.choice(FOODS), f"some {rng.choice(FOODS)}", f"the {rng.choice(FOODS)}"]
        )
    if kind == "place":
        return rng.choice(PLACES + [rng.choice(CITIES)])
    if kind == "animal":
        return rng.choice(
            [f"the {rng.choice(ANIMALS)}", f"a {rng.choice(ADJECTIVES)} {rng.choice(ANIMALS)}"]
        )
    return rng.choice(NAMES)


def _number(rng: random.Random) -> str:
    return str(
        rng.choice(
            [
                rng.randint(2, 12),
                rng.randint(13, 99),
                rng.randint(100, 999),
                rng.randint(1000, 99999),
            ]
        )
    )


def _price(rng: random.Random) -> str:
    return rng.choice(
        [f"${rng.randint(1, 99)}", f"${rng.randint(1, 500)}.{rng.randint(1, 99):02d}"]
    )


def _clock(rng: random.Random) -> str:
    return rng.choice(
        [
            f"{rng.randint(1, 12)}:{rng.choice([0, 15, 30, 45, rng.randint(1, 59)]):02d}",
            f"{rng.randint(1, 12)} o'clock",
        ]
    )


def _date(rng: random.Random) -> str:
    day = rng.randint(1, 28)
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return rng.choice(
        [
            f"{rng.choice(MONTHS)} {day}{suffix}",
            f"the {day}{suffix} of {rng.choice(MONTHS)}",
            f"{rng.choice(WEEKDAYS)}",
            f"{rng.choice(MONTHS)} {rng.randint(1950, 2030)}",
        ]
    )


def _clause(rng: random.Random) -> str:
    """An independent clause without final punctuation."""
    name, other = rng.choice(NAMES), rng.choice(NAMES)
    present, past, kind = rng.choice(VERBS)
    verb_in, verb_in_past = rng.choice(INTRANSITIVE)
    when, place = rng.choice(TIMES), rng.choice(PLACES)
    forms = [
        lambda: f"{name} {past} {_obj(rng, kind)} {when}",
        lambda: f"{name} will {present} {_obj(rng, kind)} {when}",
        lambda: f"we need to {present} {_obj(rng, kind)} {when}",
        lambda: f"I {past} {_obj(rng, kind)} at {place}",
        lambda: f"{name} and {other} {verb_in_past} at {place}",
        lambda: f"the {rng.choice(THINGS)} in {place} looks {rng.choice(ADJECTIVES)}",
        lambda: f"it was {rng.choice(ADJECTIVES)} and {rng.choice(ADJECTIVES)} {when}",
        lambda: f"{name} said that {place} was {rng.choice(ADJECTIVES)}",
        lambda: (
            f"there are {_number(rng)} {rng.choice(FOODS)} in the {rng.choice(['box', 'bag', 'basket', 'fridge'])}"
        ),
        lambda: (
            f"the {rng.choice(['train', 'bus', 'flight', 'ferry', 'meeting', 'concert', 'class'])} leaves at {_clock(rng)}"
        ),
        lambda: f"the {rng.choice(THINGS)} costs {_price(rng)}",
        lambda: f"{name} was born on {_date(rng)}",
        lambda: f"I am {rng.choice(FEELINGS)} that {name} {verb_in_past}",
        lambda: (
            f"my {rng.choice(['sister', 'brother', 'friend', 'neighbor', 'boss', 'cousin', 'teacher'])} lives in {rng.choice(CITIES)}"
        ),
        lambda: f"{name} usually {verb_in}s {when}".replace("ys ", "ies ").replace("chs ", "ches "),
        lambda: f"the {rng.choice(ANIMALS)} {verb_in_past} near {place}",
        lambda: f"{_number(rng)} people came to {place} {when}",
        lambda: f"{name} has {_a(rng.choice(ADJECTIVES))} {rng.choice(ANIMALS)} called {other}",
        lambda: f"we stayed in {rng.choice(CITIES)} for {rng.randint(2, 14)} days",
        lambda: f"about {rng.randint(5, 95)}% of the {rng.choice(FOODS)} was gone",
    ]
    return rng.choice(forms)()


def _sentence(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    present, _past, kind = rng.choice(VERBS)
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(PHRASES)
    if roll < 0.45:
        text = _clause(rng)
        if rng.random() < 0.2:
            text = f"{rng.choice(OPENERS)} {text}"
        return text[0].upper() + text[1:] + rng.choice(".....!")
    if roll < 0.65:
        text = f"{_clause(rng)}, {rng.choice(CONNECTORS)} {_clause(rng)}"
        return text[0].upper() + text[1:] + "."
    if roll < 0.82:
        questions = [
            f"Did {name} {present} {_obj(rng, kind)}?",
            f"Where did you put {_obj(rng, 'thing')}?",
            f"Can you {present} {_obj(rng, kind)} {rng.choice(TIMES)}?",
            f"What time does {place_of(rng)} open on {rng.choice(WEEKDAYS)}?",
            f"How much is {_obj(rng, 'thing')}?",
            f"Why was {name} so {rng.choice(ADJECTIVES)} {rng.choice(TIMES)}?",
            f"Would you like some {rng.choice(FOODS)}?",
            f"Is it true that {_clause(rng)}?",
            f"Have you ever been to {rng.choice(CITIES)}?",
            f"Who is going to {present} {_obj(rng, kind)}?",
        ]
        return rng.choice(questions)
    requests = [
        f"Please {present} {_obj(rng, kind)} {rng.choice(TIMES)}.",
        f"Don't forget to {present} {_obj(rng, kind)}.",
        f"Let's meet at {place_of(rng)} at {_clock(rng)}.",
        f"Remind me to call {name} on {_date(rng)}.",
        f"Turn left at {place_of(rng)} and walk for {rng.randint(2, 20)} minutes.",
        f"Could you {present} {_obj(rng, kind)}, please?",
        f"Add {_number(rng)} {rng.choice(FOODS)} to the shopping list.",
        f"Tell {name} that I am {rng.choice(FEELINGS)}.",
    ]
    return rng.choice(requests)


def place_of(rng: random.Random) -> str:
    return rng.choice(PLACES)


WORD_FRAMES = [
    "The next word is {0}.",
    "She wrote {0} and {1} on the board.",
    "Is the answer {0} or {1}?",
    "He said {0}, then {1}, then {2}.",
    "Please look up {0} in the dictionary.",
    "The list says {0}, {1} and {2}.",
    "I heard {0} and thought of {1}.",
    "Spell {0} for me, please.",
    "Their team was called the {0} {1}.",
    "We talked about {0} until midnight.",
    "Nobody knew what {0} meant.",
    "The last clue was {0}.",
]


def read_wordlist(path: str) -> list[str]:
    """Plain lowercase dictionary words of 3–12 letters (no names, no possessives)."""
    with open(path, encoding="utf-8", errors="ignore") as f:
        return sorted(
            {
                w
                for w in (line.strip() for line in f)
                if w.isalpha() and w.islower() and w.isascii() and 3 <= len(w) <= 12
            }
        )


def _word_sentence(rng: random.Random, words: list[str]) -> str:
    frame = rng.choice(WORD_FRAMES)
    return frame.format(*(rng.choice(words) for _ in range(3)))


def is_heldout(text: str) -> bool:
    return hashlib.md5(text.encode()).digest()[0] < 4  # 4 / 256: one in 64


def _unique(seed: int, words: list[str] | None = None, word_share: float = 0.0) -> Iterator[str]:
    rng = random.Random(seed)
    seen: set[str] = set()
    while True:
        text = _word_sentence(rng, words) if words and rng.random() < word_share else _sentence(rng)
        if text not in seen:
            seen.add(text)
            yield text


def training_sentences(
    count: int, seed: int = 1, words: list[str] | None = None, word_share: float = 0.25
) -> list[str]:
    """`count` distinct sentences, none of them held out; with `words`, about `word_share` of
    them are word-list sentences."""
    out = []
    for text in _unique(seed, words, word_share):
        if not is_heldout(text):
            out.append(text)
            if len(out) == count:
                return out
    raise AssertionError("unreachable")


def heldout_sentences(count: int, seed: int = 2) -> list[str]:
    """`count` distinct held-out sentences (never in any training set)."""
    out = []
    for text in _unique(seed):
        if is_heldout(text):
            out.append(text)
            if len(out) == count:
                return out
    raise AssertionError("unreachable")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="print generated sentences")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--heldout", action="store_true")
    p.add_argument("--wordlist", help="e.g. /usr/share/dict/words")
    args = p.parse_args()
    if args.heldout:
        lines = heldout_sentences(args.count)
    else:
        words = read_wordlist(args.wordlist) if args.wordlist else None
        lines = training_sentences(args.count, words=words)
    for line in lines:
        print(line)
