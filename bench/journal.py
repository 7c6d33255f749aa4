"""Journal export, replay and verify throughput: runs bench/journal_throughput.py.

(The figures live there: a module named ``journal`` here would shadow the ``journal``
package for type checkers.) Usage: .venv/bin/python bench/journal.py [--events N]
"""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("journal_throughput.py")), run_name="__main__")
