"""Tests of shipyard.release."""
