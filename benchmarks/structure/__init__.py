"""The code's own shape: the path of an option down the stack (``option_path``); the
rooms, arrows and wings of the packages (``rooms``)."""
