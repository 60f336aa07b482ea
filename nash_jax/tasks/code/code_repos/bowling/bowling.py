"""Ten-pin bowling: the score of a game from the pins knocked down by each roll."""


def frames(rolls):
    """The rolls grouped into ten frames; the tenth keeps its bonus rolls."""
    out, i = [], 0
    while len(out) < 9 and i < len(rolls):
        if rolls[i] == 10:
            out.append(rolls[i:i + 1])
            i += 1
        else:
            out.append(rolls[i:i + 2])
            i += 2
    if i < len(rolls):
        out.append(rolls[i:])
    return out


def is_strike(frame):
    return frame[0] == 10


def is_spare(frame):
    return not is_strike(frame) and len(frame) >= 2 and frame[0] + frame[1] == 10


def score(rolls):
    """The total: a strike adds the next two rolls, a spare the next one."""
    if any(pins < 0 or pins > 10 for pins in rolls):
        raise ValueError(f"every roll knocks down 0 to 10 pins: {rolls}")
    total, i = 0, 0
    for _ in range(10):
        if i >= len(rolls):
            break
        if rolls[i] == 10:
            total += 10 + sum(rolls[i + 1:i + 3])
            i += 1
        elif sum(rolls[i:i + 2]) == 10:
            total += 10 + sum(rolls[i + 2:i + 3])
            i += 2
        else:
            total += sum(rolls[i:i + 2])
            i += 2
    return total
