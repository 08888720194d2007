#!/usr/bin/env python3
"""Generate the bundled classification task ``support_intents``.

Short customer-support messages to an online shop, labelled with one of five
intents: billing, shipping, refund, technical, account. Texts are composed
from hand-written message frames and vocabularies with a seeded
``random.Random``, so the output is reproducible byte for byte:

    python scripts/make_bundled_task.py            # writes app/icl/data/support_intents.jsonl
    python scripts/make_bundled_task.py --check    # fails if the committed file differs

Each JSONL row: ``{"input": ..., "output": ..., "split": "train" | "test"}``.
The split is fixed here (stratified per label) and shipped with the file; the
same frame may appear in both splits with different fillers, as with real
support tickets, but no text appears twice.

Label words were chosen to be one token each, with a leading space, in the
SmolLM2 tokenizer (" billing", " shipping", " refund", " technical",
" account").
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

SEED = 20240611
PER_LABEL = 120  # 600 messages in all
TEST_PER_LABEL = 40  # 200 test, 400 train
OUT = Path(__file__).resolve().parents[1] / "app" / "icl" / "data" / "support_intents.jsonl"

PRODUCTS = [
    "wireless headset", "pair of running shoes", "coffee maker", "phone case", "desk lamp",
    "winter jacket", "blender", "yoga mat", "backpack", "smartwatch", "bluetooth speaker",
    "office chair", "air fryer", "duvet cover", "laptop stand", "pair of rain boots", "water bottle",
    "electric kettle", "gaming mouse", "mechanical keyboard", "throw pillow", "pair of sunglasses", "toaster", "baby monitor", "vacuum cleaner", "picture frame", "tent",
    "rice cooker", "denim jacket", "wall clock", "kids' bike helmet", "cast iron pan",
]
DEVICES = ["fitness tracker", "smart scale", "smart thermostat", "doorbell camera", "smartwatch",
           "smart lock", "smart plug", "e-reader", "robot vacuum", "smart bulb"]
PHONES = ["iPhone", "Android phone", "Pixel", "Samsung tablet", "iPad", "work laptop", "Chromebook"]
BROWSERS = ["Chrome", "Firefox", "Safari", "Edge"]
APP_PAGES = ["cart", "wishlist", "order history", "checkout", "settings", "product", "search",
             "home", "rewards", "saved addresses"]
CARRIERS = ["UPS", "FedEx", "the postal service", "DHL", "the courier"]
COUNTRIES = ["Canada", "Mexico", "Ireland", "Australia", "Japan", "Germany", "Brazil", "Norway"]
CITIES = ["Chicago", "Lisbon", "Singapore", "Toronto", "Lagos", "Warsaw", "Denver", "Manila"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
HOLIDAYS = ["Christmas", "Thanksgiving", "my daughter's birthday", "Mother's Day",
            "the long weekend", "Valentine's Day", "our wedding anniversary"]
PLANS = [("basic", "premium"), ("monthly", "family"), ("starter", "pro"), ("student", "standard")]
CARDS = ["Visa", "Mastercard", "Amex", "debit card", "credit card"]
ERRORS = ["500", "403", "404", "E102", "E-17", "429", "502", "0x8004"]
NAMES = ["Dana", "Priya", "Marco", "Lena", "Tom", "Aisha", "Kenji", "Sofia", "Jamal", "Olga"]


def _order(rng: random.Random) -> str:
    return rng.choice(["#", "", "order ", "no. "]) + str(rng.randint(100000, 999999))


def _amount(rng: random.Random) -> str:
    return f"${rng.randint(5, 240)}.{rng.choice(['00', '99', '49', '95', '50', '18'])}"


def _fill(rng: random.Random) -> dict[str, str]:
    plan = rng.choice(PLANS)
    return {
        "product": rng.choice(PRODUCTS), "device": rng.choice(DEVICES),
        "phone": rng.choice(PHONES), "browser": rng.choice(BROWSERS),
        "page": rng.choice(APP_PAGES), "carrier": rng.choice(CARRIERS),
        "country": rng.choice(COUNTRIES), "city": rng.choice(CITIES),
        "day": rng.choice(DAYS), "month": rng.choice(MONTHS),
        "holiday": rng.choice(HOLIDAYS), "plan": plan[0], "plan2": plan[1],
        "card": rng.choice(CARDS), "error": rng.choice(ERRORS), "name": rng.choice(NAMES),
        "order": _order(rng), "amount": _amount(rng), "amount2": _amount(rng),
        "small": f"${rng.randint(3, 40)}.{rng.choice(['00', '99', '50'])}",
        "n": str(rng.randint(2, 12)), "n2": str(rng.randint(2, 4)),
        "code": rng.choice(["SAVE10", "WELCOME15", "SPRING20", "FREESHIP", "VIP25"]),
    }


FRAMES: dict[str, list[str]] = {
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

OPENERS = ["", "", "", "", "Hi, ", "Hello, ", "Hey, ", "Hi there, ", "Good morning, ",
           "Hi team, ", "Quick question: ", "Hello support, ", "Hi, {name} here. ", "Urgent: "]
CLOSERS = ["", "", "", "", " Thanks!", " Thank you.", " Thanks in advance.", " Please help.",
           " Appreciate it.", " This is really frustrating.", " Any update would help.",
           " Cheers, {name}", " Let me know asap.", " Thanks, {name}"]


def _style(rng: random.Random, text: str) -> str:
    """Light, realistic noise: some people type in lower case or skip the final stop."""
    r = rng.random()
    if r < 0.12:
        text = text.lower()
    elif r < 0.2:
        text = text.rstrip(".")
    return text


KEEP_CASE = {"I", "I'd", "I'm", "I've", "UPS", "FedEx", "DHL", "PayPal", "Google"}


def _message(rng: random.Random, frame: str) -> str:
    f = _fill(rng)
    opener = rng.choice(OPENERS).format(**f)
    body = frame.format(**f)
    body = body[0].upper() + body[1:]
    first = body.split()[0].rstrip(",.?!")
    if opener.endswith(", ") and first not in KEEP_CASE and not first[0].isdigit():
        body = body[0].lower() + body[1:]  # "Hi, the app crashes..."
    closer = rng.choice(CLOSERS).format(**f)
    return _style(rng, (opener + body + closer).strip())


def build(seed: int = SEED) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for label, frames in FRAMES.items():
        texts: list[str] = []
        # Round-robin over shuffled frames so every frame is used 4-5 times.
        order = frames[:]
        while len(texts) < PER_LABEL:
            rng.shuffle(order)
            for frame in order:
                if len(texts) == PER_LABEL:
                    break
                for _ in range(50):  # retry until the filled text is new
                    text = _message(rng, frame)
                    if text.lower() not in seen:
                        seen.add(text.lower())
                        texts.append(text)
                        break
        rng.shuffle(texts)
        for i, text in enumerate(texts):
            rows.append({"input": text, "output": label,
                         "split": "test" if i < TEST_PER_LABEL else "train"})
    rng.shuffle(rows)
    return rows


def render(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if --out differs from a fresh build")
    args = ap.parse_args()
    text = render(build())
    if args.check:
        ok = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if ok else f"{args.out} differs from a fresh build")
        return 0 if ok else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {len(text.splitlines())} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
