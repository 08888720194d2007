"""Job kinds. Every public module here is imported on first use of the registry
and registers its kinds with ``app.jobs.registry.register``."""
