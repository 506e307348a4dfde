"""The mesh tier."""
