"""Runs inside a trial process (forked from the trial server): builds the user's dataset,
DataLoader and step, and runs the measured loop. Imports nothing of the sweep side."""
