"""The HTTP API (python-contract §4, §8, §9) on FastAPI: app assembly, authentication, bodies and
one router module per area. May import everything below it in ``blackops``; never cli."""
