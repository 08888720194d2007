"""Job kinds, registered explicitly: every module named in ``KIND_MODULES`` is imported on first use
of the registry and registers its kinds with ``app.jobs.registry.register``. A module that fails to
import is an error (it would otherwise silently remove a kind)."""

KIND_MODULES = ("canary_mia", "epsilon", "iclinf", "sleep", "synthesize")
