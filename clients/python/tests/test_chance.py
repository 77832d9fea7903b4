"""The breaker's rule of runs that chance explains, case by case, as the Rust
library's tests of it."""

from stormguard_client.chance import RUN_BY_CHANCE, Run, _likely, _upper_bound


def run(length: int, calls: int, failures: int) -> Run:
    return Run(length, calls, failures, opens_at=5, threshold=0.5)


def test_a_chance_that_is_the_limit_but_for_rounding_reaches_it():
    product = 1.0
    for _ in range(5):
        product *= 0.1
    assert product > RUN_BY_CHANCE, "the rounding this guards against"
    assert not _likely(0.1, 5), "0.1**5 is one in 100,000: five are not chance"
    assert _likely(0.1, 4)


def test_the_bound_lies_above_the_rate_and_narrows_with_the_sample():
    few, many = _upper_bound(3, 10), _upper_bound(300, 1_000)
    assert few > 0.3 and many > 0.3 and few > many


def test_what_chance_excuses():
    assert run(6, 12, 8).by_chance(), "two of six before excuse six"
    assert not run(6, 11, 8).by_chance(), "two of five before excuse none"
    assert not run(5, 1_000, 5).by_chance(), "no failure before the run"
    assert run(9, 1_000, 9 + 490).by_chance(), "49 %: nine are chance"
    assert not run(10, 1_000, 10 + 490).by_chance(), "ten are the cap"
    assert not run(5, 1_000, 5 + 500).by_chance(), "a background at the threshold"
    assert run(5, 1_000, 5 + 99).by_chance(), "10 %: the bound excuses five"
    assert not run(6, 1_000, 6 + 99).by_chance(), "10 %: not six"
