"""Developer tools that are not part of the product: structure.py draws the project's import structure."""
