"""Property-based fuzzing of the manifest loader and the CLI over it (`nox -s fuzz`)."""
