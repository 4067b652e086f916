"""One module per op family; each registers its kernel class (and its checks) on import."""
