"""jobyard and its peers on one store, in ONE run, one table (the machine is noisy: ratios are
only meaningful when measured side by side).

    python bench/compare.py --store {redis,postgres} [--jobs N]

Runs ``bench/throughput.py --backend STORE`` and then every peer of ``bench/peers.py`` for that
store, each on a fresh store of the same kind, and prints one row per library with the targets of
the issues under them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers import main

if __name__ == "__main__":
    main(sys.argv[1:], with_jobyard=True)
