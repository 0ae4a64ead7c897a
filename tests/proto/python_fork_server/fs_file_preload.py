"""A preload that opens a file and keeps it: forking after it is not safe."""

import os
import tempfile

KEPT = tempfile.NamedTemporaryFile(prefix="fork-server-kept-", suffix=".bin")
PATH = os.path.realpath(KEPT.name)
