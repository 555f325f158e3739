"""Decisions from measurements alone: paired-ratio statistics (stats), when to stop measuring (racing),
winners from the store (selection).
"""
