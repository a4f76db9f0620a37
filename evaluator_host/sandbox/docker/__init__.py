"""The docker backend: hardened containers, the engine boundary, runtime images and build boxes."""
