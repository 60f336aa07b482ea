"""A verifier for the synthetic task, named by import path in tests (eval.verifier): a response is
correct when it opens in the `witty` style, and well formatted when it ends with a full stop."""


def witty_first(prompts, responses):
    return [{"answer": "witty", "correct": response.split()[:1] == ["witty"],
             "formatted": response.rstrip().endswith(".")} for response in responses]
