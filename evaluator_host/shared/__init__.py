"""Small structures every domain may use (an LRU); they import nothing of the package, so any layer can."""
