"""The results store: every build, sample and profile, committed as it lands (database).
"""
