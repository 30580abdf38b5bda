"""The stand-in measurement tools (see the package's __init__)."""
