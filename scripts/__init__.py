"""Runnable project scripts (`python -m scripts.demo`)."""
