"""Tests of shipyard.builders.zipapp._boot, the bootstrap copied into every zipapp."""
