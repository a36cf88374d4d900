"""Repository-wide pytest hooks (xdist worker pinning lives here)."""
