"""A sibling module of conditional.py."""


def scale(n):
    return n * 2
