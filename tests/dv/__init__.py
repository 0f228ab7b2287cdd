"""Tests of the DV700 functional core."""
