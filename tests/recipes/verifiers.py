"""Functions that tests name by import path: a verifier for the synthetic task (eval.verifier: a
response is correct when it opens in the `witty` style, well formatted when it ends with a full stop)
and a python judge."""


def witty_first(prompts, responses):
    return [{"answer": "witty", "correct": response.split()[:1] == ["witty"],
             "formatted": response.rstrip().endswith(".")} for response in responses]


def longer_wins(prompts, candidates):
    """A python judge (preferences): the longer response wins, equal lengths tie."""
    import numpy as np

    lengths = np.array([[len(c) for c in cs] for cs in candidates], float)
    return 0.5 + 0.5 * np.sign(lengths[:, :, None] - lengths[:, None, :])


def broken_judge(prompts, candidates):
    """A python judge with a bug of the user's: it raises."""
    scores = {}
    return scores[prompts[0]]
