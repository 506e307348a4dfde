"""The interop tier."""
