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


def test_a_next_rounds_walk_resumes_after_the_last_rounds_and_keys_the_same() -> None:
    """A session's round: the last round's prompt and output, new input, its own output.
    Its first walk starts after the last round's whole walk (``segments._WALKED``) and
    gives the keys of a walk from the start and of the definition."""
    import workbench.segments as segments_mod

    rng = random.Random(3)
    for trial in range(40):
        bs = rng.choice((1, 4, 16))
        segments_mod._WALKED.clear()  # (other tests' walks)
        prompt = Segments([(UNIT, 1, 0, rng.randrange(1, 300))])
        start = len(prompt)
        for r in range(6):
            out = rng.randrange(1, 100)
            seg = prompt + Segments([(OUTPUT, 100 * trial + r, 0, out)])
            before = list(segments_mod._WALKED.values())
            resumed = any(w[0] == seg.parts[:-2] for w in before)
            got = BlockKeyer(seg, bs).upto(len(seg))
            assert resumed == (r > 0)  # the last round's walk, taken once
            walked = list(segments_mod._WALKED.values())
            assert [w[0] for w in walked] == [seg.parts]  # for the next round
            assert got == _reference(seg, bs)
            segments_mod._WALKED.clear()
            assert BlockKeyer(seg, bs).upto(len(seg)) == got  # from the start
            fresh = rng.randrange(1, 200)
            prompt = seg + Segments([(UNIT, 1, start, fresh)])  # the next round's prompt
            start += fresh


def test_a_partial_first_walk_neither_resumes_past_its_stop_nor_is_remembered() -> None:
    import workbench.segments as segments_mod

    bs = 4
    segments_mod._WALKED.clear()
    prompt = Segments([(UNIT, 1, 0, 37)])
    last = prompt + Segments([(OUTPUT, 1, 0, 9)])
    BlockKeyer(last, bs).upto(len(last))  # remembered
    seg = last + Segments([(UNIT, 1, 37, 20), (OUTPUT, 2, 0, 5)])
    keyer = BlockKeyer(seg, bs)
    got = keyer.upto(12)  # a first call short of the last round's blocks
    assert got == _reference(seg, bs)[:3]
    assert keyer.upto(len(seg)) == _reference(seg, bs)[3:]
    assert all(w[0] != seg.parts for w in segments_mod._WALKED.values())  # not whole


def test_a_hash_id_rows_walk_is_not_remembered() -> None:
    """A row of hash-id blocks is never carried into a next prompt: its walk is not kept."""
    import workbench.segments as segments_mod

    segments_mod._WALKED.clear()
    seg = Segments([(BLOCK, 7, 0, 512), (BLOCK, 8, 0, 300), (OUTPUT, 1, 0, 20)])
    assert BlockKeyer(seg, 16).upto(len(seg)) == _reference(seg, 16)
    assert not segments_mod._WALKED
