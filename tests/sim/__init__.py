"""Tests of the in-process simulator: traces, engines, outputs and the CLI."""
