"""Helpers every part of the engine (processor, kstream, state) may import; not for applications."""
