"""The bottom layer: errors, typed configuration, the run store and pure statistics.

Nothing here imports torch, transformers or any other esopt layer, so every part of esopt
(and its tests) can use it cheaply.
"""
