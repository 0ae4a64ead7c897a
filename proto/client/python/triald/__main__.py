"""python3 -m triald run SPEC [--params JSON] | check SPEC | fork-server (see triald._cli)."""

import sys

# Imported through the package, so that the objective's own `import triald` gets this very
# module (one TrialPruned class, one TrialStopped class).
from triald._cli import main

sys.exit(main(sys.argv[1:]))
