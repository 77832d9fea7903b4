"""What a dependency answered over the last three seconds, counted by the
tenth of a second: the send gate's delivery rate and its test of overload
under ``overloadWhen: most-refused``."""

from stormguard_client.answers import U32_MAX, Answers

MS = 1_000_000


def test_counts_by_the_tenth_and_forgets_what_is_older_than_three_seconds():
    answers = Answers(0)
    answers.accepted(3, 0)
    answers.accepted(4, 150 * MS)
    assert answers.delivered() == 7.0
    answers.roll(1_050 * MS)
    assert answers.delivered() == 4.0, "the first tenth has left the last second"
    assert answers.peak() == 7.0, "but not the last three"
    answers.roll(3_200 * MS)
    assert not answers.any_accepted()
    assert answers.peak() == 0.0


def test_a_tenth_of_the_answers_refused_is_no_overload_most_of_them_is():
    answers = Answers(0)
    answers.accepted(90, 0)
    answers.refused(10, 0)
    assert not answers.shows_overload(), "90 accepted, 10 refused"
    answers.refused(80, 0)
    assert not answers.shows_overload(), "90 and 90: a dependency failing half at random"
    answers.refused(60, 0)
    assert not answers.shows_overload(), "90 and 150: within four standard deviations"
    answers.refused(10, 0)
    assert answers.shows_overload(), "90 and 160: beyond four standard deviations"
    down = Answers(0)
    down.refused(16, 0)
    assert not down.shows_overload(), "sixteen refusals could be chance"
    down.refused(1, 0)
    assert down.shows_overload(), "seventeen and nothing accepted are not"


def test_counting_one_kind_moves_the_other_on_too():
    answers = Answers(0)
    answers.refused(20, 0)
    assert answers.shows_overload()
    answers.accepted(1, 1_000 * MS)
    assert not answers.shows_overload(), "the refusals have left the last second"
    answers.refused(1, 1_050 * MS)
    assert answers.delivered() == 1.0 and answers.any_accepted()


def test_times_before_the_origin_count_in_its_tenth_and_a_tenth_holds_at_most_u32_max():
    answers = Answers(5 * MS)
    answers.accepted(2, 0)
    answers.accepted(U32_MAX, 5 * MS)
    assert answers.delivered() == float(U32_MAX)


def test_a_copy_counts_on_apart():
    answers = Answers(0)
    answers.accepted(5, 0)
    copy = answers.copy()
    copy.accepted(5, 0)
    answers.refused(1, 0)
    assert (answers.delivered(), copy.delivered()) == (5.0, 10.0)
    assert copy.peak() == 10.0 and not copy.shows_overload()
