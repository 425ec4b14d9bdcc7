"""The built-in word tokenizer round-trips ordinary ids."""

import random

from workbench.tokenizer import (
    FIRST_ORDINARY,
    VOCAB_SIZE,
    get_tokenizer,
    output_token,
    request_base,
)


def test_round_trip_ordinary_ids():
    tok = get_tokenizer()
    rng = random.Random(7)
    ids = [rng.randrange(FIRST_ORDINARY, VOCAB_SIZE) for _ in range(5000)]
    assert tok.encode(tok.decode(ids)) == ids
    assert tok.encode(tok.decode_delta(ids[:3])) == ids[:3]


def test_unknown_words_are_stable_ordinary_ids():
    tok = get_tokenizer()
    a = tok.encode("Hello, world!")
    assert a == tok.encode("Hello,   world!") and len(a) == 2
    assert all(FIRST_ORDINARY <= t < VOCAB_SIZE for t in a)


def test_output_ids_are_deterministic_and_ordinary():
    base = request_base("req-1", seed=0)
    ids = [output_token(base, i) for i in range(100)]
    assert ids == [output_token(request_base("req-1", 0), i) for i in range(100)]
    assert ids != [output_token(request_base("req-1", 1), i) for i in range(100)]
    assert all(FIRST_ORDINARY <= t < VOCAB_SIZE for t in ids)
