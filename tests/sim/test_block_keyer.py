"""``BlockKeyer`` resumed block by block (an engine's decode) gives the keys of one pass,
and both follow the prefix-key definition (workbench/segments.py, "Prefix identity")."""

from __future__ import annotations

import random

from workbench.segments import _ROOT, BLOCK, OUTPUT, UNIT, BlockKeyer, Segments, _mix_one


def _reference(seg: Segments, bs: int) -> list[int]:
    """Key of block ``i``: the running key over the whole parts before the part holding
    the block's last token, that part's source and start, and the block's end."""
    out: list[int] = []
    for end in range(bs, len(seg) + 1, bs):
        run, off = _ROOT, 0
        for k, key, s, m in seg.parts:
            if end - 1 < off + m:
                out.append(_mix_one(hash((run, k, key, s)), end))
                break
            run, off = hash((run, k, key, s, m)), off + m
    return out


def test_resumed_keys_equal_one_pass_and_the_definition() -> None:
    rng = random.Random(7)
    for trial in range(60):
        bs = rng.choice((1, 4, 16))
        parts = [(rng.choice((UNIT, BLOCK)), rng.randrange(5), rng.randrange(100),
                  rng.choice((1, bs, 3 * bs, rng.randrange(1, 200))))
                 for _ in range(rng.randrange(1, 6))]
        seg = Segments(parts) + Segments([(OUTPUT, trial, 0, rng.randrange(1, 400))])
        whole = BlockKeyer(seg, bs).upto(len(seg))
        assert whole == _reference(seg, bs)
        keyer, got, n = BlockKeyer(seg, bs), [], 0
        while n < len(seg):  # one token at a time, a block at a time, or a jump
            n = min(len(seg), n + rng.choice((1, 1, bs, bs - 1, 9 * bs, rng.randrange(1, 300))))
            got += keyer.upto(n)
            assert got == whole[: n // bs]
        assert keyer.upto(len(seg)) == []


def test_a_sum_of_segments_is_the_normal_form_of_their_parts() -> None:
    """``a + b`` merges only at the seam (both sides are normal): the same parts and
    length as normalising the concatenation whole, whatever the parts."""
    rng = random.Random(11)
    for _ in range(2000):
        sides = []
        for _ in range(2):
            parts, start = [], rng.randrange(3)
            for _ in range(rng.randrange(4)):
                n = rng.randrange(0, 4)
                parts.append((UNIT, rng.randrange(2), start, n))
                start = start + n if rng.random() < 0.6 else rng.randrange(6)
            sides.append(Segments(parts))
        a, b = sides
        whole = Segments([*a.parts, *b.parts])
        got = a + b
        assert got.parts == whole.parts and len(got) == len(whole) == len(a) + len(b)
