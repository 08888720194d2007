#!/usr/bin/env python3
"""Generate the bundled classification tasks (seeded, reproducible byte for byte).

* ``assistant_intents`` (the default task): short requests to a home voice
  assistant, five intents: weather, music, alarm, lights, shopping (in the
  spirit of the SNIPS and CLINC intent benchmarks). Many frames are indirect
  ("It's too dark in the kitchen", "Get me up at 6 on Monday") so that the
  intent is not always spelled out by its label word.
* ``support_intents``: short customer-support messages to an online shop,
  five intents: billing, shipping, refund, technical, account. Harder: the
  bundled 135M model barely learns it in context (docs/icl.md).

Texts are composed from hand-written frames and vocabularies with a seeded
``random.Random``:

    python scripts/make_bundled_task.py            # writes app/icl/data/<task>.jsonl for both tasks
    python scripts/make_bundled_task.py --check    # exit 1 if a committed file differs

Each JSONL row: ``{"input": ..., "output": ..., "split": "train" | "test"}``.
The split is fixed here (stratified: 80 train / 40 test per label, 600 rows)
and ships with the file. A frame may appear in both splits with different
fillers, as the same phrasing recurs across real users; no text appears twice.

Label words are one token each, with a leading space, in the SmolLM2
tokenizer (" weather", " music", " alarm", " lights", " shopping";
" billing", " shipping", " refund", " technical", " account").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Callable

SEED = 20240611
PER_LABEL = 120  # 600 requests in all
TEST_PER_LABEL = 40  # 200 test, 400 train

CITIES = ["Boston", "Madrid", "Chicago", "Lisbon", "Denver", "Seattle", "Toronto", "Austin", "Dublin",
          "Oslo", "Phoenix", "Miami", "Nairobi", "Osaka", "Berlin", "Cape Town"]
PLACES = ["the beach", "the lake", "the mountains", "the park", "the stadium", "my parents' place", "the cabin",
          "the airport", "downtown", "the campsite"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WHEN = ["today", "tonight", "tomorrow", "this afternoon", "this weekend", "tomorrow morning", "on Saturday",
        "on Friday night", "later today", "next week"]
ACTIVITIES = ["my run", "the barbecue", "the picnic", "my bike ride", "the soccer game", "the wedding",
              "our hike", "the school trip", "a walk with the dog", "washing the car"]
ARTISTS = ["Adele", "the Beatles", "Taylor Swift", "Miles Davis", "Bob Marley", "Coldplay", "Beyonce",
           "Nina Simone", "Daft Punk", "Ed Sheeran", "Fleetwood Mac", "Bach", "Drake", "Queen"]
GENRES = ["jazz", "classical music", "hip hop", "country", "reggae", "lo-fi beats", "rock", "blues",
          "eighties pop", "bossa nova", "piano music", "salsa"]
PLAYLISTS = ["workout", "road trip", "dinner party", "focus", "sleep", "Sunday morning", "running", "study"]
MOODS = ["relaxing", "upbeat", "calm", "happy", "mellow", "energetic"]
TIMES = ["6", "6:30", "7", "5:45", "7:15", "8", "4:30", "9", "6:50", "5"]
DURATIONS = ["ten minutes", "twenty minutes", "half an hour", "an hour", "five minutes", "fifteen minutes"]
ALARM_NAMES = ["gym", "meds", "school run", "early shift", "flight", "yoga"]
ROOMS = ["kitchen", "bedroom", "living room", "hallway", "bathroom", "office", "garage", "dining room",
         "kids' room", "basement", "guest room", "garden"]
COLORS = ["blue", "warm white", "red", "purple", "green", "soft orange"]
PERCENT = ["10", "20", "30", "40", "50", "70", "80"]
ITEMS = ["milk", "eggs", "bread", "bananas", "coffee beans", "paper towels", "dish soap", "dog food",
         "olive oil", "rice", "toothpaste", "batteries", "cat litter", "oat milk", "tomatoes", "butter",
         "laundry detergent", "trash bags", "yogurt", "apples", "pasta", "shampoo"]
STORES = ["the grocery store", "the supermarket", "Costco", "the pharmacy", "the market"]


def _fill(rng: random.Random) -> dict[str, str]:
    a, b = rng.sample(ITEMS, 2)
    room, room2 = rng.sample(ROOMS, 2)
    return {
        "city": rng.choice(CITIES), "place": rng.choice(PLACES), "day": rng.choice(DAYS),
        "when": rng.choice(WHEN), "activity": rng.choice(ACTIVITIES), "artist": rng.choice(ARTISTS),
        "genre": rng.choice(GENRES), "playlist": rng.choice(PLAYLISTS), "mood": rng.choice(MOODS),
        "time": rng.choice(TIMES), "duration": rng.choice(DURATIONS), "alarm_name": rng.choice(ALARM_NAMES),
        "room": room, "room2": room2, "color": rng.choice(COLORS),
        "pct": rng.choice(PERCENT), "item": a, "item2": b, "store": rng.choice(STORES),
        "n": str(rng.randint(2, 4)),
    }


FRAMES: dict[str, list[str]] = {
    "weather": [
        "will it rain in {city} {when}?",
        "do I need a jacket {when}?",
        "how hot is it going to get {when}?",
        "what's the forecast for {day}?",
        "is it going to snow {when}?",
        "how windy is it at {place} right now?",
        "should I bring an umbrella {when}?",
        "what's the temperature outside?",
        "is there a storm coming {when}?",
        "will it be sunny in {city} on {day}?",
        "how cold will it be {when}?",
        "is it humid in {city} {when}?",
        "any chance of frost {when}?",
        "what's it going to be like for {activity} {when}?",
        "is it nice enough for {activity} {when}?",
        "will the rain stop before {activity}?",
        "is it freezing outside right now?",
        "how much snow are they expecting in {city}?",
        "what time is sunset {when}?",
        "do I need sunscreen for {place} {when}?",
        "is it going to be cloudy {when}?",
        "tell me the forecast for {city}",
        "are we getting a heat wave {when}?",
        "how foggy is it near {place}?",
        "will it clear up by {day}?",
    ],
    "music": [
        "play some {genre} in the {room}",
        "put on my {playlist} playlist",
        "skip this song",
        "play the latest album by {artist}",
        "turn the volume up a bit",
        "what song is this?",
        "play something {mood} for dinner",
        "shuffle my liked songs",
        "play {artist}",
        "pause the music",
        "add this track to my {playlist} playlist",
        "play {genre} for studying",
        "play that song again",
        "I want to hear some {genre}",
        "put on something {mood}",
        "who sings this one?",
        "play the radio in the {room}",
        "start my {playlist} mix",
        "next track",
        "play {artist}'s greatest hits",
        "turn the music down, it's too loud",
        "play something by {artist} in the {room}",
        "I'm in the mood for {genre}",
        "put some {mood} tunes on",
        "play the top songs of this week",
    ],
    "alarm": [
        "wake me up at {time} tomorrow",
        "set an alarm for {time} am",
        "cancel my morning alarm",
        "snooze for {duration}",
        "wake me up in {duration}",
        "change my alarm to {time}",
        "set a weekday alarm for {time}",
        "turn off all my alarms for {day}",
        "what time is my alarm set for?",
        "I need to get up at {time} for my flight",
        "set an alarm called {alarm_name} at {time}",
        "delete the {time} alarm",
        "make my alarm louder",
        "wake me up an hour earlier tomorrow",
        "get me up at {time} on {day}",
        "do I have an alarm set for tomorrow?",
        "set {n} alarms, starting at {time}",
        "I have to be up by {time}",
        "move my {alarm_name} alarm to {time}",
        "don't let me oversleep tomorrow, {time} please",
        "remind me to get up at {time}",
        "stop the alarm",
        "turn off the {alarm_name} alarm",
        "set my alarm for {time} every day",
        "I want to wake up at {time} on {day}",
    ],
    "lights": [
        "turn off the {room} lights",
        "dim the {room} lights to {pct} percent",
        "switch on the porch light",
        "make the {room} lights warmer",
        "turn all the lights off downstairs",
        "set the lamp in the {room} to {color}",
        "are the {room} lights still on?",
        "brighten the {room} lights",
        "turn on the lights in the {room} at sunset",
        "switch off the light in the {room}",
        "it's too dark in the {room}",
        "turn the desk lamp on",
        "make it brighter in here",
        "lights off in {duration}",
        "turn the {room} and {room2} lights on",
        "set the {room} to {pct} percent brightness",
        "can you turn the lamp off?",
        "change the {room} lights to {color}",
        "it's too bright in the {room}",
        "turn on the night light in the {room}",
        "switch everything off in the {room}",
        "light up the {room}",
        "did I leave the {room} light on?",
        "make the {room} a bit darker",
        "turn the lights on, I just got home",
    ],
    "shopping": [
        "add {item} to my shopping list",
        "put {item} and {item2} on the grocery list",
        "what's on my shopping list?",
        "remove {item} from the list",
        "order more {item}",
        "add {item} to my list",
        "reorder my usual {item}",
        "clear my shopping list",
        "do I have {item} on my list?",
        "add {n} packs of {item} to the cart",
        "buy more {item}",
        "put {item} on the shopping list",
        "we're out of {item}",
        "I need to pick up {item} at {store}",
        "add {item} for the weekend",
        "take {item} off my list",
        "send my grocery list to my phone",
        "we're running low on {item} and {item2}",
        "order {item} for delivery tomorrow",
        "remind me to buy {item} at {store}",
        "what do I still need to get at {store}?",
        "add {item} to the {store} list",
        "make a new list for {store}",
        "don't forget {item} next time I shop",
        "get {item} and {item2} from {store}",
    ],
}

OPENERS = ["", "", "", "", "", "", "hey, ", "okay, ", "please ", "can you ", "could you ", "hi, "]
CLOSERS = ["", "", "", "", "", ", please", ", thanks", ", thank you"]
ASKS = ("can you ", "could you ", "please ")  # need a verb-first frame after them


def _sentence_case(text: str) -> str:
    return text[0].upper() + text[1:]


def _request(rng: random.Random, frame: str) -> str:
    f = _fill(rng)
    body = frame.format(**f)
    opener = rng.choice(OPENERS)
    verb_first = not body.endswith("?") and body.split()[0] in (
        "play", "put", "skip", "turn", "shuffle", "pause", "add", "start", "set", "cancel", "snooze", "wake",
        "change", "delete", "make", "get", "move", "remind", "stop", "dim", "switch", "brighten", "light",
        "remove", "order", "reorder", "clear", "buy", "take", "send", "tell")
    if opener in ASKS and not verb_first:
        opener = ""
    closer = rng.choice(CLOSERS) if verb_first else ""
    if opener in ("can you ", "could you ") and not body.endswith("?"):
        text = _sentence_case(opener + body + closer) + "?"
    else:
        text = _sentence_case(opener + body + closer)
        if not text.endswith("?") and rng.random() < 0.5:
            text += "."
    return text


def _build(frames: dict[str, list[str]], make: Callable[[random.Random, str], str],
           key: Callable[[str], str], seed: int = SEED) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for label, label_frames in frames.items():
        texts: list[str] = []
        order = label_frames[:]
        while len(texts) < PER_LABEL:  # round-robin over shuffled frames: each used 4-5 times
            rng.shuffle(order)
            for frame in order:
                if len(texts) == PER_LABEL:
                    break
                for _ in range(50):  # retry until the filled text is new
                    text = make(rng, frame)
                    if key(text) not in seen:
                        seen.add(key(text))
                        texts.append(text)
                        break
        rng.shuffle(texts)
        for i, text in enumerate(texts):
            rows.append({"input": text, "output": label, "split": "test" if i < TEST_PER_LABEL else "train"})
    rng.shuffle(rows)
    return rows


# ------------------------------------------------------------ support_intents
# The first bundled task, kept for callers that name it: short customer-support
# messages to an online shop (billing, shipping, refund, technical, account).
# SmolLM2-135M barely learns it in context (docs/icl.md); larger models do.

S_PRODUCTS = [
    "wireless headset", "pair of running shoes", "coffee maker", "phone case", "desk lamp",
    "winter jacket", "blender", "yoga mat", "backpack", "smartwatch", "bluetooth speaker",
    "office chair", "air fryer", "duvet cover", "laptop stand", "pair of rain boots", "water bottle",
    "electric kettle", "gaming mouse", "mechanical keyboard", "throw pillow", "pair of sunglasses", "toaster", "baby monitor", "vacuum cleaner", "picture frame", "tent",
    "rice cooker", "denim jacket", "wall clock", "kids' bike helmet", "cast iron pan",
]
S_DEVICES = ["fitness tracker", "smart scale", "smart thermostat", "doorbell camera", "smartwatch",
           "smart lock", "smart plug", "e-reader", "robot vacuum", "smart bulb"]
S_PHONES = ["iPhone", "Android phone", "Pixel", "Samsung tablet", "iPad", "work laptop", "Chromebook"]
S_BROWSERS = ["Chrome", "Firefox", "Safari", "Edge"]
S_APP_PAGES = ["cart", "wishlist", "order history", "checkout", "settings", "product", "search",
             "home", "rewards", "saved addresses"]
S_CARRIERS = ["UPS", "FedEx", "the postal service", "DHL", "the courier"]
S_COUNTRIES = ["Canada", "Mexico", "Ireland", "Australia", "Japan", "Germany", "Brazil", "Norway"]
S_CITIES = ["Chicago", "Lisbon", "Singapore", "Toronto", "Lagos", "Warsaw", "Denver", "Manila"]
S_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
S_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
S_HOLIDAYS = ["Christmas", "Thanksgiving", "my daughter's birthday", "Mother's Day",
            "the long weekend", "Valentine's Day", "our wedding anniversary"]
S_PLANS = [("basic", "premium"), ("monthly", "family"), ("starter", "pro"), ("student", "standard")]
S_CARDS = ["Visa", "Mastercard", "Amex", "debit card", "credit card"]
S_ERRORS = ["500", "403", "404", "E102", "E-17", "429", "502", "0x8004"]
S_NAMES = ["Dana", "Priya", "Marco", "Lena", "Tom", "Aisha", "Kenji", "Sofia", "Jamal", "Olga"]


def _s_order(rng: random.Random) -> str:
    return rng.choice(["#", "", "order ", "no. "]) + str(rng.randint(100000, 999999))


def _s_amount(rng: random.Random) -> str:
    return f"${rng.randint(5, 240)}.{rng.choice(['00', '99', '49', '95', '50', '18'])}"


def _s_fill(rng: random.Random) -> dict[str, str]:
    plan = rng.choice(S_PLANS)
    return {
        "product": rng.choice(S_PRODUCTS), "device": rng.choice(S_DEVICES),
        "phone": rng.choice(S_PHONES), "browser": rng.choice(S_BROWSERS),
        "page": rng.choice(S_APP_PAGES), "carrier": rng.choice(S_CARRIERS),
        "country": rng.choice(S_COUNTRIES), "city": rng.choice(S_CITIES),
        "day": rng.choice(S_DAYS), "month": rng.choice(S_MONTHS),
        "holiday": rng.choice(S_HOLIDAYS), "plan": plan[0], "plan2": plan[1],
        "card": rng.choice(S_CARDS), "error": rng.choice(S_ERRORS), "name": rng.choice(S_NAMES),
        "order": _s_order(rng), "amount": _s_amount(rng), "amount2": _s_amount(rng),
        "small": f"${rng.randint(3, 40)}.{rng.choice(['00', '99', '50'])}",
        "n": str(rng.randint(2, 12)), "n2": str(rng.randint(2, 4)),
        "code": rng.choice(["SAVE10", "WELCOME15", "SPRING20", "FREESHIP", "VIP25"]),
    }


S_FRAMES: dict[str, list[str]] = {
    "billing": [
        "I was charged twice for {order}. Can you reverse one of the charges?",
        "There's a charge of {amount} on my {card} statement from you that I don't recognize.",
        "My {card} keeps getting declined at checkout even though there's plenty of money on it.",
        "Can you send me a copy of the invoice for my purchase in {month}?",
        "The promo code {code} was accepted but I was still billed the full price.",
        "My subscription renewed at {amount} instead of the usual {small}. Why did the price go up?",
        "How do I update the card on file for my {plan} plan?",
        "There's a pending authorization of {amount} that never went away.",
        "Do you accept PayPal, or only cards?",
        "The sales tax on my last bill looks way too high.",
        "I need an invoice with my company name and VAT number for expenses.",
        "I was billed for the {plan2} plan but I'm on the {plan} plan.",
        "Is it possible to split the payment for {order} across two cards?",
        "There's a late payment fee on my statement but I paid on {day}.",
        "You charged my old {card} even though I changed my payment method last week.",
        "Why was I billed {amount} during my free trial?",
        "Can I switch from monthly to annual billing to save money?",
        "I got charged in euros instead of dollars and my bank added a conversion fee.",
        "My gift card balance wasn't applied to the order total, the whole thing went on my card.",
        "Can I pay by bank transfer instead of card?",
        "The amount on my receipt doesn't match what was taken from my account.",
        "I keep getting emails saying my payment failed, but the charge went through.",
        "When exactly will I be billed for the {plan2} plan if I upgrade today?",
        "Your checkout added a {amount} service fee that wasn't shown before I paid.",
        "My {card} was charged {n2} times for one subscription this month.",
        "Where can I download my billing history for the last year?",
    ],
    "shipping": [
        "Where is my package? The tracking hasn't updated in {n} days.",
        "Can I change the delivery address on {order}? I just moved.",
        "The tracking page says delivered but there's nothing at my door.",
        "Do you ship to {country}?",
        "How much does express shipping cost, and how fast is it?",
        "My {product} was supposed to arrive on {day} but it's still in transit.",
        "Can I pick up my order at a store instead of having it delivered?",
        "The tracking number you sent me doesn't work on the {carrier} website.",
        "Will my {product} arrive before {holiday} if I order today?",
        "{carrier} left my package at the wrong address.",
        "Can the driver leave the parcel with my neighbor if I'm not home?",
        "{order} has been stuck on processing for {n} days. When will it ship?",
        "Only one of the two boxes from {order} showed up. Is the other one still coming?",
        "Is there a way to schedule the delivery for the weekend?",
        "My parcel is sitting at the {carrier} depot and they won't deliver it.",
        "I paid for next-day delivery and it's been {n2} days already.",
        "Why is my {product} shipping from overseas? The page said it was in stock locally.",
        "Can you hold my shipment until I'm back from vacation on the {n}th?",
        "Does free shipping apply to orders under fifty dollars?",
        "The delivery estimate for my {product} keeps moving back.",
        "Can you ship the {product} in plain packaging? It's a surprise gift.",
        "My package was returned to sender because the courier couldn't find my building.",
        "Can I add a gate code to the delivery instructions for {order}?",
        "How do I know which carrier is delivering my {product}?",
        "The box arrived a day early but the driver left it out in the rain.",
        "Is it possible to combine my two orders into one shipment?",
    ],
    "refund": [
        "I'd like to return the {product}. It doesn't fit.",
        "How long does it take for a refund to show up on my {card}?",
        "The {product} arrived broken and I want my money back.",
        "I mailed the return {n} days ago and still haven't been refunded.",
        "Can I exchange the {product} for a different color?",
        "Where do I print a return label for {order}?",
        "Is the return window 30 days or 60 days?",
        "I changed my mind about the {product}. Can I send it back unopened?",
        "The {product} looks nothing like the photos, I'd like a refund please.",
        "You only refunded {small} but I paid {amount} for the {product}.",
        "Do I have to pay for return shipping if the {product} is defective?",
        "I received the wrong size and want to swap it for a medium.",
        "My refund for {order} was approved but the money never arrived.",
        "Can I return a gift without the receipt?",
        "The {product} stopped working after {n2} weeks. Can I get a replacement or a refund?",
        "I returned the {product} at your store but the refund went to a card I closed.",
        "Is it too late to return the {product} I bought in {month}?",
        "Can I get store credit instead of a refund for the {product}?",
        "The return drop-off point refused my package. How else can I send it back?",
        "Part of {order} was missing, so I want a partial refund.",
        "I cancelled {order} before it shipped. When do I get my money back?",
        "Do you refund the original shipping cost when I return something?",
        "The {product} smells like smoke, I want to return it.",
        "How do I start a return for two items from the same order?",
        "Can I return the {product} if I already threw away the box?",
        "My return shows as received but the refund status still says pending.",
    ],
    "technical": [
        "The app crashes every time I open the {page} page.",
        "I get error {error} when I try to check out on the website.",
        "Your website won't load on {browser}, it just shows a blank screen.",
        "Push notifications stopped working after the latest app update.",
        "My {device} won't sync with the app anymore.",
        "The search bar returns no results, even for things I know you sell.",
        "Pages are loading really slowly on my {phone} today.",
        "The checkout button doesn't do anything when I click it in {browser}.",
        "Product images aren't showing up, just grey boxes.",
        "The {device} keeps disconnecting from my wifi.",
        "The firmware update for my {device} failed halfway and now it won't turn on.",
        "The barcode scanner in the app can't access my camera.",
        "I can't upload a photo to my review, the spinner just keeps spinning.",
        "The app freezes on the loading screen on my {phone}.",
        "The {page} page suddenly shows up in German even though my settings are English.",
        "Your site says error {error} every time I add something to my cart.",
        "The {device} pairing code from the app is never accepted.",
        "Videos on the product pages won't play on {browser}.",
        "Since the update the app drains my {phone} battery really fast.",
        "The map in the store locator is blank on my {phone}.",
        "Dark mode makes the text on the {page} page unreadable.",
        "The app says there is no internet connection, but every other app works fine.",
        "The voice assistant on the {device} doesn't respond after the update.",
        "The filters on the {page} page reset every time I scroll.",
        "My {device} shows a red blinking light and the app can't find it.",
        "The {page} page keeps reloading by itself in {browser}.",
    ],
    "account": [
        "I forgot my password and the reset email never arrives.",
        "How do I change the email address on my account?",
        "Please delete my account and all the data you have on me.",
        "I'd like to change my username.",
        "I got a sign-in alert from {city}. I think someone else is using my account.",
        "How do I turn on two-factor authentication?",
        "My account got locked after too many login attempts.",
        "I have two accounts with different emails, can you merge them?",
        "How do I update the phone number on my profile?",
        "How do I stop getting your marketing emails?",
        "Can I add my partner {name} as a second user on my account?",
        "I never got the verification code to finish signing up.",
        "How do I change the display name on my profile?",
        "My account says it's been suspended and I don't know why.",
        "I lost access to the email I signed up with. How do I get into my account?",
        "Can I download a copy of all my personal data?",
        "I want to remove my old address from my profile.",
        "My rewards points disappeared from my account after I changed my email.",
        "How do I log out of my account on all devices?",
        "I signed up with Google but now I want a normal password login.",
        "My {phone} was stolen, please sign me out everywhere and lock my account.",
        "I can't find where to change my password in the account settings.",
        "Can I transfer my account to my work email?",
        "I'm getting emails for an account I never created.",
        "My date of birth is wrong on my profile and I can't edit it.",
        "The security questions on my account don't accept my answers.",
    ],
}

S_OPENERS = ["", "", "", "", "Hi, ", "Hello, ", "Hey, ", "Hi there, ", "Good morning, ",
           "Hi team, ", "Quick question: ", "Hello support, ", "Hi, {name} here. ", "Urgent: "]
S_CLOSERS = ["", "", "", "", " Thanks!", " Thank you.", " Thanks in advance.", " Please help.",
           " Appreciate it.", " This is really frustrating.", " Any update would help.",
           " Cheers, {name}", " Let me know asap.", " Thanks, {name}"]


def _s_style(rng: random.Random, text: str) -> str:
    """Light, realistic noise: some people type in lower case or skip the final stop."""
    r = rng.random()
    if r < 0.12:
        text = text.lower()
    elif r < 0.2:
        text = text.rstrip(".")
    return text


S_KEEP_CASE = {"I", "I'd", "I'm", "I've", "UPS", "FedEx", "DHL", "PayPal", "Google"}


def _s_message(rng: random.Random, frame: str) -> str:
    f = _s_fill(rng)
    opener = rng.choice(S_OPENERS).format(**f)
    body = frame.format(**f)
    body = body[0].upper() + body[1:]
    first = body.split()[0].rstrip(",.?!")
    if opener.endswith(", ") and first not in S_KEEP_CASE and not first[0].isdigit():
        body = body[0].lower() + body[1:]  # "Hi, the app crashes..."
    closer = rng.choice(S_CLOSERS).format(**f)
    return _s_style(rng, (opener + body + closer).strip())



TASKS: dict[str, Callable[[], list[dict[str, str]]]] = {
    "assistant_intents": lambda: _build(FRAMES, _request, lambda t: t.lower().rstrip(".?")),
    "support_intents": lambda: _build(S_FRAMES, _s_message, str.lower),
}
DATA = Path(__file__).resolve().parents[1] / "app" / "icl" / "data"


def build(task: str = "assistant_intents") -> list[dict[str, str]]:
    return TASKS[task]()


def render(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=[*TASKS, "all"], default="all")
    ap.add_argument("--out", type=Path, default=None, help="output file (one task only); default app/icl/data/<task>.jsonl")
    ap.add_argument("--check", action="store_true", help="exit 1 if a written file differs from a fresh build")
    args = ap.parse_args()
    tasks = list(TASKS) if args.task == "all" else [args.task]
    if args.out is not None and len(tasks) != 1:
        ap.error("--out needs one --task")
    status = 0
    for task in tasks:
        out = args.out or DATA / f"{task}.jsonl"
        text = render(build(task))
        if args.check:
            ok = out.exists() and out.read_text(encoding="utf-8") == text
            print(f"{out}: " + ("up to date" if ok else "differs from a fresh build"))
            status |= 0 if ok else 1
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {len(text.splitlines())} rows to {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
