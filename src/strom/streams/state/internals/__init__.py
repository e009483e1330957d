"""Internals of the state stores: the layers stacked on every store, and the encodings they share."""
