"""Greedy text wrapping, truncation and centring for fixed-width output."""


def wrap(text, width):
    """Lines of at most `width` characters, breaking between words; a word longer than the
    width gets a line of its own."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def truncate(text, width, ellipsis="..."):
    """`text` cut to `width` characters, ending in the ellipsis when something was cut."""
    if len(text) <= width:
        return text
    return text[:width - len(ellipsis)] + ellipsis


def center(text, width, fill=" "):
    """`text` padded on both sides to `width`; an odd leftover goes on the right."""
    padding = width - len(text)
    if padding <= 0:
        return text
    left = padding // 2
    return fill * left + text + fill * (padding - left)


def justify(line, width):
    """Spaces added between the words of `line`, leftmost gaps first, to fill `width`."""
    words = line.split()
    if len(words) < 2:
        return line.ljust(width)
    gaps = len(words) - 1
    spaces = width - sum(len(word) for word in words)
    wide, extra = divmod(spaces, gaps)
    out = ""
    for i, word in enumerate(words[:-1]):
        out += word + " " * (wide + (1 if i < extra else 0))
    return out + words[-1]
