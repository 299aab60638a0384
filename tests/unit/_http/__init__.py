"""Tests of shipyard._http."""
