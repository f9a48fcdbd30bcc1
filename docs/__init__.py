"""The documentation: markdown pages, and the generator of their reference parts (`docs/reference.py`)."""
