"""The session's pending words: what each reader gets, over any history of the fragments."""

from __future__ import annotations

import random

import pytest

from resilient_agent._engine.pending_words import Fragment, PendingWords


def _pending(held: list[Fragment]) -> list[Fragment]:
    return [f for f in held if not f.delivered and not f.superseded]


@pytest.mark.parametrize("seed", range(40))
def test_the_pending_words_are_those_neither_delivered_nor_superseded(seed: int) -> None:
    # the store skips the fragments it once found done; every way a fragment changes (added,
    # added earlier, delivered, superseded, given back, expired, dropped beyond the bounds)
    # leaves its answers those of a scan of every fragment held
    rng = random.Random(seed)
    words = PendingWords(max_fragments=rng.choice((1, 2, 3, 8)), max_age_s=30.0)
    now = 0.0
    for step in range(200):
        now += rng.random()
        held = list(words)
        action = rng.random()
        if action < 0.3:
            words.add(Fragment(f"w{step}", now))
        elif action < 0.4:
            words.add_earlier([Fragment(f"e{step}", now - 5.0) for _ in range(rng.randint(1, 2))])
        elif action < 0.6 and held:
            rng.choice(held).delivered = True
        elif action < 0.7 and held:
            rng.choice(held).superseded = True
        elif action < 0.8:
            taken = [f for f in _pending(held) if rng.random() < 0.5]
            for fragment in taken:
                fragment.delivered = True
            if rng.random() < 0.5:
                words.any_undelivered()  # read while they count as delivered
                words.give_back(taken)
        elif action < 0.85:
            # what a look of the dropped-turn answerer reads: the words still pending after it
            assert words.expire(now) == _pending(list(words))
        elif action < 0.9:
            words.deliver_said(" ".join(f.text for f in held if rng.random() < 0.3))
        else:
            words.limit(max_fragments=rng.choice((1, 2, 8)), max_age_s=30.0)
        expected = _pending(list(words))
        assert words.undelivered() == expected
        assert words.any_undelivered() == bool(expected)
        assert words.word_count() == sum(len(f.text.split()) for f in expected)
