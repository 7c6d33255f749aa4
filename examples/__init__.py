"""Example BlackOps applications (served by ``make run``)."""
