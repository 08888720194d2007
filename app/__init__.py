"""dpicl: differentially private in-context learning, served and audited."""

__version__ = "0.1.0"
