"""Exam statistics: letter grades, mean, median and a histogram of letters."""

BOUNDARIES = ((90, "A"), (80, "B"), (70, "C"), (60, "D"))


def letter(score):
    """The letter of a score from 0 to 100 (90 and above is an A)."""
    if not 0 <= score <= 100:
        raise ValueError(f"score {score} is outside 0..100")
    for lowest, grade in BOUNDARIES:
        if score >= lowest:
            return grade
    return "F"


def mean(scores):
    if not scores:
        raise ValueError("mean of no scores")
    return sum(scores) / len(scores)


def median(scores):
    if not scores:
        raise ValueError("median of no scores")
    ordered = sorted(scores)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def histogram(scores):
    """How many scores earned each letter, every letter present."""
    counts = {grade: 0 for _, grade in BOUNDARIES}
    counts["F"] = 0
    for score in scores:
        counts[letter(score)] += 1
    return counts


def passed(scores, pass_mark=60):
    return [score for score in scores if score >= pass_mark]
