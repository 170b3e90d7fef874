"""The code's own shape: the path of an option down the stack."""
