"""A tokenizer and evaluator of integer arithmetic: + - * / and parentheses."""

OPERATORS = {"+": 1, "-": 1, "*": 2, "/": 2}


def tokenize(text):
    """Numbers (as ints), operators and parentheses, in order; spaces are skipped."""
    tokens, i = [], 0
    while i < len(text):
        char = text[i]
        if char.isdigit():
            start = i
            while i < len(text) and text[i].isdigit():
                i += 1
            tokens.append(int(text[start:i]))
            continue
        if char in OPERATORS or char in "()":
            tokens.append(char)
        elif not char.isspace():
            raise ValueError(f"unexpected {char!r} at position {i}")
        i += 1
    return tokens


def to_postfix(tokens):
    """Shunting-yard: the tokens in reverse Polish order."""
    output, stack = [], []
    for token in tokens:
        if isinstance(token, int):
            output.append(token)
        elif token == "(":
            stack.append(token)
        elif token == ")":
            while stack[-1] != "(":
                output.append(stack.pop())
            stack.pop()
        else:
            while stack and stack[-1] != "(" and OPERATORS[stack[-1]] >= OPERATORS[token]:
                output.append(stack.pop())
            stack.append(token)
    return output + stack[::-1]


def evaluate(text):
    """The value of an expression; / is integer division."""
    values = []
    for token in to_postfix(tokenize(text)):
        if isinstance(token, int):
            values.append(token)
            continue
        right, left = values.pop(), values.pop()
        if token == "+":
            values.append(left + right)
        elif token == "-":
            values.append(left - right)
        elif token == "*":
            values.append(left * right)
        else:
            values.append(left // right)
    return values[0]
