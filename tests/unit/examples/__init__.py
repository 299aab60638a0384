"""Tests of the example programs under examples/."""
