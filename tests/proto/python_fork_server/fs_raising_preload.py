"""A preload whose import raises."""


def _load_dataset():
    raise RuntimeError("the data set is missing: /nonexistent/train.bin")


DATA = _load_dataset()
