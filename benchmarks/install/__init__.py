"""Installing the package: each extra alone in a fresh venv."""
