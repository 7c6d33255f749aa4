"""The ``blackops`` command line: ``main`` and one module per command group. Command modules
import what a command needs when it runs, so ``blackops --help`` stays fast."""
