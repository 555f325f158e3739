"""Building a candidate without a GPU: the driver's build trees and Ninja (trees), the machine code's
digest and features (codeinfo), the flag vocabulary and its probe (space).
"""
