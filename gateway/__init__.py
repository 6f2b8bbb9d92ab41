"""tiergate: an OpenAI-compatible gateway that routes each request to the cheapest tier."""

__version__ = "0.1.0"
