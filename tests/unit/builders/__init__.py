"""Tests of shipyard.builders."""
