"""domain package."""
